#!/usr/bin/env bash
# LiteLLM's proxy beside Switchboard, against the same mock upstream, in the same run.
#
# Installs `litellm[proxy]` into a throwaway virtualenv OUTSIDE the repository
# (default /tmp/switchboard-litellm-venv; reused when already there), writes a LiteLLM
# config whose only model points at the mock upstream that bench.run is about to start
# on a fixed port, starts `litellm` (one worker, loopback), then runs
#   python -m bench.run --only latency,throughput --mock-port M --peer-url http://127.0.0.1:P ...
# which prints Switchboard's rows and LiteLLM's side by side (results in
# bench/results/litellm.json). Extra arguments go to bench.run (e.g. --quick).
#
# Environment: LITELLM_VENV (virtualenv path), LITELLM_VERSION (pin, e.g. 1.108.7),
# PYTHON (interpreter for the virtualenv, default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${LITELLM_VENV:-/tmp/switchboard-litellm-venv}"
PY_BENCH="${ROOT}/.venv/bin/python"
case "$VENV" in
  "$ROOT"|"$ROOT"/*) echo "LITELLM_VENV must be outside the repository ($ROOT)" >&2; exit 2 ;;
esac
[ -x "$PY_BENCH" ] || { echo "no $PY_BENCH: create the project virtualenv first (make test or make bench)" >&2; exit 2; }

if [ ! -x "$VENV/bin/litellm" ]; then
  echo "installing litellm[proxy]${LITELLM_VERSION:+==$LITELLM_VERSION} into $VENV ..." >&2
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
  if ! "$VENV/bin/pip" install --quiet "litellm[proxy]${LITELLM_VERSION:+==$LITELLM_VERSION}"; then
    echo "pip could not install litellm[proxy] (see the pip output above); nothing was measured" >&2
    exit 1
  fi
fi
VERSION="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))')"

free_port() { "$PY_BENCH" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MOCK_PORT="$(free_port)"
PEER_PORT="$(free_port)"
KEY="sk-switchboard-bench"
WORK="$(mktemp -d /tmp/switchboard-litellm-XXXXXX)"

cat > "$WORK/config.yaml" <<EOF
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
  master_key: ${KEY}
EOF

LITELLM_PID=""
cleanup() {
  if [ -n "$LITELLM_PID" ] && kill -0 "$LITELLM_PID" 2>/dev/null; then
    kill "$LITELLM_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$LITELLM_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$LITELLM_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "starting LiteLLM ${VERSION} on 127.0.0.1:${PEER_PORT} (mock upstream will be on ${MOCK_PORT}) ..." >&2
LITELLM_LOG=ERROR LITELLM_TELEMETRY=False DISABLE_SCHEMA_UPDATE=True \
  "$VENV/bin/litellm" --config "$WORK/config.yaml" --host 127.0.0.1 --port "$PEER_PORT" --num_workers 1 \
  > "$WORK/litellm.log" 2>&1 &
LITELLM_PID=$!

ready=""
for _ in $(seq 1 600); do  # up to 120 s: LiteLLM imports a lot
  if ! kill -0 "$LITELLM_PID" 2>/dev/null; then
    echo "LiteLLM exited before it was ready:" >&2; tail -40 "$WORK/litellm.log" >&2; exit 1
  fi
  if curl -fsS "http://127.0.0.1:${PEER_PORT}/health/liveliness" > /dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "LiteLLM did not answer /health/liveliness within 120 s:" >&2; tail -40 "$WORK/litellm.log" >&2; exit 1; }

cd "$ROOT"
"$PY_BENCH" -m bench.run --only latency,throughput --mock-port "$MOCK_PORT" \
  --peer-url "http://127.0.0.1:${PEER_PORT}" --peer-key "$KEY" --peer-model bench --peer-name "LiteLLM ${VERSION}" \
  --out "$ROOT/bench/results/litellm.json" "$@"
