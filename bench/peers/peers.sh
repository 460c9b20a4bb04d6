#!/usr/bin/env bash
# Peers beside Switchboard, against the same mock upstream, in the same run (make bench).
#
# Each peer is installed into a throwaway directory OUTSIDE the repository (reused when
# already there) and started on loopback, one worker each:
#   litellm  LiteLLM's proxy (`litellm[proxy]` from PyPI; a config whose only model is the mock),
#            as `litellm` starts it (uvicorn)
#   litellm-fast  the same install on Granian (`--run_granian`, shipped with litellm[proxy]) with
#            its native Rust bridge switched on (LITELLM_RUST=true) where it applies
#   portkey  Portkey's open-source gateway (`@portkey-ai/gateway` from the npm registry, run
#            with node; routed to the mock by its x-portkey-provider / x-portkey-custom-host headers)
# then runs `python -m bench.run --mock-port M --peers-file F "$@"`, which prints
# Switchboard's rows with every peer's beside them. A peer that cannot be installed or
# started is left out with one line saying why; the rest of the run goes on.
#
# Environment: PEERS (default "litellm litellm-fast portkey"; empty runs Switchboard alone),
# PEERS_DIR (default /tmp/switchboard-peers), LITELLM_VERSION, PORTKEY_VERSION (pins),
# PYTHON (interpreter for LiteLLM's virtualenv, default python3).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${PEERS_DIR:-/tmp/switchboard-peers}"
PY_BENCH="${ROOT}/.venv/bin/python"
PEERS="${PEERS-litellm litellm-fast portkey}"
LITELLM_VERSION="${LITELLM_VERSION:-1.108.7}"
PORTKEY_VERSION="${PORTKEY_VERSION:-1.15.2}"
case "$DIR" in
  "$ROOT"|"$ROOT"/*) echo "PEERS_DIR must be outside the repository ($ROOT)" >&2; exit 2 ;;
esac
[ -x "$PY_BENCH" ] || { echo "no $PY_BENCH: create the project virtualenv first (make test)" >&2; exit 2; }
mkdir -p "$DIR"

free_port() { "$PY_BENCH" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MOCK_PORT="$(free_port)"
WORK="$(mktemp -d /tmp/switchboard-peers-run-XXXXXX)"
PIDS=()
ENTRIES=()
cleanup() {
  for pid in "${PIDS[@]}"; do pkill -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# wait_ready NAME PID URL LOG: up to 120 s for URL to answer (LiteLLM imports a lot).
wait_ready() {
  for _ in $(seq 1 600); do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "peer $1 exited before it was ready; left out:" >&2
      tail -20 "$4" >&2
      return 1
    fi
    curl -fsS "$3" > /dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "peer $1 did not answer $3 within 120 s; left out:" >&2
  tail -20 "$4" >&2
  return 1
}

# start_litellm [fast]: LiteLLM as its command starts it; with "fast", on Granian with LITELLM_RUST.
start_litellm() {
  local venv="$DIR/litellm-$LITELLM_VERSION" port key="sk-switchboard-bench" variant="${1:-}"
  local name="litellm${variant:+-$variant}" label="LiteLLM $LITELLM_VERSION" server=() rust=()
  if [ ! -x "$venv/bin/litellm" ]; then
    echo "installing litellm[proxy]==$LITELLM_VERSION into $venv ..." >&2
    if ! { "${PYTHON:-python3}" -m venv "$venv" && "$venv/bin/pip" install --quiet --upgrade pip &&
      "$venv/bin/pip" install --quiet "litellm[proxy]==$LITELLM_VERSION"; }; then
      echo "pip could not install litellm[proxy]==$LITELLM_VERSION; LiteLLM left out" >&2
      rm -rf "$venv"
      return 1
    fi
  fi
  if [ "$variant" = fast ]; then
    server=(--run_granian) rust=(LITELLM_RUST=true) label="$label (Granian, LITELLM_RUST)"
  fi
  port="$(free_port)"
  cat > "$WORK/litellm.yaml" <<EOF
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench-up
      api_base: http://127.0.0.1:${MOCK_PORT}/v1
      api_key: sk-mock
litellm_settings:
  telemetry: false
  set_verbose: false
  drop_params: true
general_settings:
  master_key: ${key}
EOF
  # without Switchboard's DATABASE_URL / REDIS_URL: LiteLLM would take them as its own
  env -u DATABASE_URL -u REDIS_URL LITELLM_LOG=ERROR LITELLM_TELEMETRY=False DISABLE_SCHEMA_UPDATE=True "${rust[@]}" \
    "$venv/bin/litellm" --config "$WORK/litellm.yaml" --host 127.0.0.1 --port "$port" --num_workers 1 "${server[@]}" \
    > "$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$name" $! "http://127.0.0.1:${port}/health/liveliness" "$WORK/$name.log" || return 1
  # the README's performance section sets a ≥ 20× throughput target against LiteLLM as it starts
  local target=""
  [ -z "$variant" ] && target=", \"target\": 20"
  ENTRIES+=("{\"name\": \"$label\", \"url\": \"http://127.0.0.1:${port}\", \"key\": \"${key}\", \"model\": \"bench\"$target}")
}

start_portkey() {
  local pkg="$DIR/portkey-$PORTKEY_VERSION" port
  local server="node_modules/@portkey-ai/gateway/build/start-server.js"
  if [ ! -f "$pkg/$server" ]; then
    command -v npm > /dev/null || { echo "npm is not installed (Debian: apt-get install npm); Portkey left out" >&2; return 1; }
    echo "installing @portkey-ai/gateway@$PORTKEY_VERSION into $pkg ..." >&2
    if ! { mkdir -p "$pkg" && (cd "$pkg" && npm install --silent --no-audit --no-fund "@portkey-ai/gateway@$PORTKEY_VERSION" > /dev/null); }; then
      echo "npm could not install @portkey-ai/gateway@$PORTKEY_VERSION; Portkey left out" >&2
      rm -rf "$pkg"
      return 1
    fi
  fi
  port="$(free_port)"
  # Portkey binds every interface; the preload keeps it on loopback like everything else here.
  (cd "$pkg" && exec env NODE_ENV=production node --import "$ROOT/bench/peers/loopback.mjs" "$server" \
    --port="$port" --headless > "$WORK/portkey.log" 2>&1) &
  PIDS+=($!)
  wait_ready portkey $! "http://127.0.0.1:${port}/" "$WORK/portkey.log" || return 1
  ENTRIES+=("{\"name\": \"Portkey $PORTKEY_VERSION\", \"url\": \"http://127.0.0.1:${port}\", \"key\": \"sk-mock\", \"model\": \"bench-up\", \"headers\": {\"x-portkey-provider\": \"openai\", \"x-portkey-custom-host\": \"http://127.0.0.1:${MOCK_PORT}/v1\"}}")
}

for peer in $PEERS; do
  case "$peer" in
    litellm) start_litellm ;;
    litellm-fast) start_litellm fast ;;
    portkey) start_portkey ;;
    *) echo "unknown peer '$peer' (choose from: litellm litellm-fast portkey)" >&2; exit 2 ;;
  esac
done

args=(--mock-port "$MOCK_PORT")
if [ ${#ENTRIES[@]} -gt 0 ]; then
  (IFS=,; echo "[${ENTRIES[*]}]") > "$WORK/peers.json"
  args+=(--peers-file "$WORK/peers.json")
fi
cd "$ROOT"
"$PY_BENCH" -m bench.run "${args[@]}" "$@"
