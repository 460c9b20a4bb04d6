"""`make cluster` / `make cluster-down`: a local scale-out cluster anyone can start.

PostgreSQL + Redis (reused when they already run on loopback, else started from the
Debian packages), the mock upstream, the demo configuration, N gateway replicas
(`manage.py serve --workers W`, each on its own 127.0.0.1 port) and HAProxy in front
of them with health checks on /health. `up` prints the URL, the admin login and an
API key and returns; every process it started is recorded in var/cluster/state.json,
which `down` reads to stop exactly those. See docs/scale-out.md#cluster.

    python -m tools.local_cluster up [--replicas 3] [--workers 2] [--port 8100]
    python -m tools.local_cluster down
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("CLUSTER_STATE_DIR") or ROOT / "var" / "cluster")
PG_ADMIN_URL = os.environ.get("CLUSTER_PG_URL", "postgres://switchboard:switchboard@127.0.0.1:5432/postgres")
PG_DATABASE = os.environ.get("CLUSTER_PG_DATABASE", "switchboard_cluster")
REDIS_PORT = int(os.environ.get("CLUSTER_REDIS_PORT", "6379"))
REDIS_DB = int(os.environ.get("CLUSTER_REDIS_DB", "9"))
DEMO_FILE = ROOT / "routing" / "fixtures" / "demo.yaml"


def haproxy_config(
    port: int,
    backends: list[tuple[str, int]],
    stats_port: int | None = None,
    check_interval_ms: int = 1000,
) -> str:
    """HAProxy in front of the replicas (explained line by line in docs/scale-out.md#haproxy).

    Round robin over replicas that answer GET /health with 200; a replica that fails two
    checks in a row is taken out, one good check brings it back. A request whose
    connection a dead replica refuses is re-sent to another one (`retries` with
    `option redispatch`), so a killed replica costs only its in-flight requests. Each
    answer names the replica that served it (X-Switchboard-Replica)."""
    servers = "\n".join(
        f"    server {name} 127.0.0.1:{backend_port} check inter {check_interval_ms} fall 2 rise 1"
        for name, backend_port in backends
    )
    stats = (
        f"""
listen stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /
    stats refresh 2s
"""
        if stats_port
        else ""
    )
    return f"""global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    timeout http-keep-alive 10s
    option http-keep-alive
    retries 3
    option redispatch 1

frontend switchboard
    bind 127.0.0.1:{port}
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk GET /health
    http-check expect status 200
    http-response set-header X-Switchboard-Replica %s
{servers}
{stats}"""


# --------------------------------------------------------------------------- small helpers


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(
    check: object, timeout_s: float, what: str, process: subprocess.Popen | None = None, log: str | None = None
) -> None:
    """Poll `check` until it holds; stop at once if `process` exits, saying why with the end of its `log`."""
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if process is not None and process.poll() is not None:
            raise SystemExit(f"{what}: the process exited with {process.returncode} (see {STATE_DIR}){_tail(log)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout_s:.0f} s (logs in {STATE_DIR}){_tail(log)}")
        time.sleep(0.2)


def _tail(log: str | None, lines: int = 15) -> str:
    """The last lines of a log in var/cluster/, to print with a failure (nothing if there is none)."""
    if log is None or not (STATE_DIR / log).exists():
        return ""
    text = (STATE_DIR / log).read_text(errors="replace").splitlines()[-lines:]
    return f"\nthe end of {log}:\n" + "\n".join(f"  {line}" for line in text)


def healthy(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def spawn(argv: list[str], log_name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process that outlives this command (own session), its output in var/cluster/<log_name>."""
    log = open(STATE_DIR / log_name, "ab")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def apt_install(*packages: str) -> None:
    print(f"installing {' '.join(packages)} (Debian packages)")
    subprocess.run(["apt-get", "update", "-qq"], check=False)
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, stdout=subprocess.DEVNULL)


# --------------------------------------------------------------------------- PostgreSQL and Redis


def ensure_postgres(state: dict) -> str:
    """PostgreSQL on 127.0.0.1:5432 (the running one, else Debian's cluster started), our own database."""
    admin = urlparse(PG_ADMIN_URL)
    if not port_open(admin.port or 5432):
        if not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
            apt_install("postgresql")
        version = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(p) for p in v.split(".")])[-1]
        if subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True).stdout.find(f"{version} main") < 0:
            subprocess.run(["pg_createcluster", version, "main"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["pg_ctlcluster", version, "main", "start"], check=True)
        state["postgres"] = version  # started here: `down` stops it
        wait_until(lambda: port_open(admin.port or 5432), 30, "PostgreSQL listening")
        role = f"CREATE ROLE {admin.username} LOGIN SUPERUSER PASSWORD '{admin.password}'"
        subprocess.run(["su", "postgres", "-c", f'psql -q -c "{role}"'], check=False, capture_output=True)
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)).fetchone():
            conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
    return admin._replace(path=f"/{PG_DATABASE}").geturl()


def ensure_redis(state: dict) -> str:
    """Redis on 127.0.0.1:REDIS_PORT (the running one, else redis-server started here), our own db index."""
    if not port_open(REDIS_PORT):
        if shutil.which("redis-server") is None:
            apt_install("redis-server")
        proc = spawn(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no"],
            "redis.log",
        )
        state["pids"]["redis"] = proc.pid
        wait_until(lambda: port_open(REDIS_PORT), 15, "Redis listening", proc)
    return f"redis://127.0.0.1:{REDIS_PORT}/{REDIS_DB}"


# --------------------------------------------------------------------------- up / down


def manage(args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def up(port: int, replicas: int, workers: int, server: str, mock_port: int, stats_port: int) -> None:
    if (STATE_DIR / "state.json").exists():
        raise SystemExit("a cluster is already up (var/cluster/state.json); `make cluster-down` first")
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        apt_install("haproxy")
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    backends = [(f"replica{i + 1}", port + 1 + i) for i in range(replicas)]
    for p in [port, mock_port, stats_port, *(bp for _, bp in backends)]:
        if port_open(p):
            raise SystemExit(
                f"port {p} is in use; nothing was started. Choose other ports: make cluster PORT=<port> "
                "(HAProxy; the replicas take the next ones) MOCK_PORT=<port> STATS_PORT=<port>"
            )
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state: dict = {"pids": {}, "replicas": {}}
    try:
        database_url = ensure_postgres(state)
        redis_url = ensure_redis(state)
        password = secrets.token_urlsafe(12)
        from tools.mock.bedrock import demo_credentials

        env = {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": secrets.token_urlsafe(40),  # one key for all replicas: sessions work on any
            "SWITCHBOARD_UPSTREAM_DEMO": "demo-upstream-key",
            "SWITCHBOARD_UPSTREAM_DEMO_BEDROCK": demo_credentials(),
            "SWITCHBOARD_USAGE_SPOOL_DIR": str(STATE_DIR / "spool"),
            "DEMO_ADMIN_PASSWORD": password,
            "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port},http://localhost:{port}",
        }
        # The demo command migrates, imports the demo configuration, creates the admin and a key.
        out = manage(["demo", "--no-serve", "--mock-port", str(mock_port), "--port", str(port)], env)
        key = next(line.split("=", 1)[1] for line in out.splitlines() if line.strip().startswith("export KEY="))
        mock = spawn([sys.executable, "-m", "tools.mock.upstream", "--port", str(mock_port)], "mock.log")
        state["pids"]["mock"] = mock.pid
        wait_until(lambda: port_open(mock_port), 15, "the mock upstream listening", mock, "mock.log")
        import httpx

        httpx.post(  # "flaky" always fails upstream, as in `make demo`
            f"http://127.0.0.1:{mock_port}/_control/script",
            json={"model": "demo-flaky", "steps": [], "then": {"status": 503}},
            timeout=5,
        )
        serve_env = {k: v for k, v in env.items() if k != "DEMO_ADMIN_PASSWORD"}
        procs: dict[str, subprocess.Popen] = {}
        for name, backend_port in backends:
            argv = [sys.executable, "manage.py", "serve", "--server", server, "--workers", str(workers)]
            replica_env = {**serve_env, "SWITCHBOARD_REPLICA": name}
            procs[name] = spawn([*argv, "--host", "127.0.0.1", "--port", str(backend_port)], f"{name}.log", replica_env)
            state["replicas"][name] = {"pid": procs[name].pid, "port": backend_port}
            _save(state)
        for name, backend_port in backends:
            what = f"{name} healthy on :{backend_port}"
            wait_until(lambda p=backend_port: healthy(p), 60, what, procs[name], f"{name}.log")
        config = STATE_DIR / "haproxy.cfg"
        config.write_text(haproxy_config(port, backends, stats_port))
        lb = spawn([haproxy, "-db", "-f", str(config)], "haproxy.log")
        state["pids"]["haproxy"] = lb.pid
        _save(state)
        wait_until(lambda: healthy(port), 20, f"HAProxy answering on :{port}", lb, "haproxy.log")
    except BaseException:
        _save(state)
        down()
        raise
    base = f"http://127.0.0.1:{port}"
    replica_lines = "\n".join(f"    {n}  http://127.0.0.1:{p}/  (serve --workers {workers})" for n, p in backends)
    print(
        f"""
Switchboard cluster ({replicas} replicas behind HAProxy; PostgreSQL db {PG_DATABASE}, Redis db {REDIS_DB})
  gateway    {base}   (HAProxy; stats on http://127.0.0.1:{stats_port}/)
  admin      {base}/admin/   user: admin   password: {password}
  dashboard  {base}/dashboard/   (Processes: every worker of every replica)
  API key    {key}
  replicas
{replica_lines}
  logs       {STATE_DIR}/
Try:
  export KEY={key}
  curl -si {base}/v1/chat/completions -H "Authorization: Bearer $KEY" \\
       -H "Content-Type: application/json" -d '{{"model": "fast", "messages": [{{"role": "user", "content": "Hello"}}]}}'
Stop it with: make cluster-down
"""
    )


def _save(state: dict) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "state.json").write_text(json.dumps(state, indent=2))


def running(pid: int) -> bool:
    """Whether pid is a live process (an exited one nobody reaped yet, a zombie, is not)."""
    from routing.runtime.usage.spool import pid_alive

    if not pid_alive(pid):
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop(pid: int, grace_s: float = 20.0) -> None:
    """SIGTERM (serve forwards it to its workers), SIGKILL to the process group after the grace."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not running(pid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)  # started in its own session: the group is ours alone
    except ProcessLookupError:
        pass


def down() -> None:
    path = STATE_DIR / "state.json"
    if not path.exists():
        print("no cluster is up (var/cluster/state.json is missing)")
        return
    state = json.loads(path.read_text())
    pids = state.get("pids", {})
    order = [pids.get("haproxy"), *(r["pid"] for r in state.get("replicas", {}).values()), pids.get("mock")]
    for pid in order:
        if pid:
            _stop(pid)
    if pids.get("redis"):
        _stop(pids["redis"])
    if state.get("postgres"):
        subprocess.run(["pg_ctlcluster", state["postgres"], "main", "stop"], check=False)
    path.unlink()
    print("cluster stopped (PostgreSQL database and logs kept; `make clean` removes var/)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.local_cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    start = sub.add_parser("up", help="start the cluster and print its URL, admin login and API key")
    start.add_argument("--port", type=int, default=8100, help="HAProxy's port; replicas use the next ones")
    start.add_argument("--replicas", type=int, default=3)
    start.add_argument("--workers", type=int, default=2, help="worker processes per replica (serve --workers)")
    start.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    start.add_argument("--mock-port", type=int, default=9101)
    start.add_argument("--stats-port", type=int, default=8199)
    sub.add_parser("down", help="stop every process `up` started")
    args = parser.parse_args(argv)
    if args.verb == "up":
        if not 1 <= args.replicas <= 16 or not 1 <= args.workers <= 64:
            parser.error("--replicas must be 1..16 and --workers 1..64")
        up(args.port, args.replicas, args.workers, args.server, args.mock_port, args.stats_port)
    else:
        down()


if __name__ == "__main__":
    main()
