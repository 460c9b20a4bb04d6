"""Processes of a benchmark run: mock upstream, gateway (daphne/uvicorn/granian), load generators.

Each runs in its own process group on loopback, with output to a log file in the run's
temporary directory; `Proc.stop()` ends only that group. Resident memory is read from
/proc/<pid>/status for the process and its descendants (granian runs a worker child).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import orjson

from gateway_project import servers as serve_commands

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
SERVERS = ("daphne", "uvicorn", "granian")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid ..." ; comm may contain spaces/parens: split after the last ')'
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry))
    return out


def rss_kb(pid: int) -> int:
    """VmRSS of pid plus all its descendants, in KiB (0 for a process that is gone)."""
    total = 0
    todo = [pid]
    for _ in range(64):  # bounded tree walk
        if not todo:
            break
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
        todo.extend(_children(current))
    return total


class Proc:
    """A child process in its own session, its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def rss_mb(self) -> float:
        return round(rss_kb(self.pid) / 1024, 1)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=timeout)
        self._log.close()


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 10.0
) -> tuple[int, bytes]:
    """A blocking loopback request for setup and control calls (not for measuring)."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_http(url: str, proc: Proc, timeout: float = 60.0) -> None:
    """Wait (bounded) until url answers 200; fail with the process log if it died or never did."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode} before serving {url}:\n{proc.tail()}")
        try:
            status, body = http("GET", url, timeout=2)
            if status == 200:
                return
            last = f"HTTP {status} {body[:200]!r}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} did not answer {url} within {timeout:.0f}s (last: {last}):\n{proc.tail()}")


def start_mock(log_dir: Path, port: int | None = None) -> tuple[Proc, str]:
    port = port or free_port()
    proc = Proc("mock", [PY, "-m", "tools.mock.upstream", "--port", str(port)], log_dir)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/v1/models", proc, timeout=30)
    return proc, url


def manage(args: list[str], env: dict[str, str], timeout: float = 300.0) -> str:
    full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env}
    result = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(args)} failed with exit {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    return result.stdout


def prepare_database(
    work: Path, name: str, yaml_text: str, org: str, agent: str, database_url: str | None = None
) -> tuple[dict[str, str], str]:
    """A fresh database (SQLite in `work` unless `database_url`): migrate, import_config,
    create_api_key. Returns (env, api key); its REDIS_URL is empty (no Redis) unless the
    caller sets one, whatever the benchmark's own environment holds."""
    env = {
        "DATABASE_URL": database_url or f"sqlite:///{work / (name + '.sqlite3')}",
        "REDIS_URL": "",
        "SWITCHBOARD_USAGE_SPOOL_DIR": str(work / f"{name}-spool"),
    }
    manage(["migrate", "-v0"], env)
    config = work / f"{name}.yaml"
    config.write_text(yaml_text)
    manage(["import_config", str(config)], env)
    key = manage(["create_api_key", "--org", org, "--agent", agent], env).strip().splitlines()[-1].strip()
    return env, key


class ThrowawayPostgres:
    """A database created for one run on the server of `server_url` (dropped by `drop()`).

    The server's own database in the URL is only used to connect; the run's database is
    `<that name>_bench_<random>` so parallel runs on one server never meet.
    """

    def __init__(self, server_url: str) -> None:
        import psycopg

        base, _, dbname = server_url.rpartition("/")
        self._admin = f"{base}/{dbname or 'postgres'}"
        self.name = f"{(dbname or 'switchboard').split('?')[0]}_bench_{os.urandom(4).hex()}"
        with psycopg.connect(self._admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.url = f"{base}/{self.name}"

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self._admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def redis_reachable(url: str) -> str | None:
    """None when Redis at `url` answers PING within 2 s, else why not."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def server_argv(server: str, port: int) -> list[str]:
    """The command line of each ASGI server, serving the same application object."""
    app = "gateway_project.asgi:application"
    if server in serve_commands.SERVERS:  # exactly the commands the README documents
        return serve_commands.command(server, "127.0.0.1", port)
    if server == "granian":
        if not importlib.util.find_spec("granian"):
            raise RuntimeError(
                "granian is not installed in this environment: `.venv/bin/pip install -r bench/requirements.txt`"
            )
        return [
            PY, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--loop", _loop(), "--no-access-log", "--log-level", "warning", app,
        ]  # fmt: skip
    raise ValueError(f"unknown server {server!r}; use one of {', '.join(SERVERS)}")


def _loop() -> str:
    """uvloop when installed (requirements.txt pins it), else the stdlib loop."""
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def start_gateway(
    server: str, name: str, log_dir: Path, env: dict[str, str], timeout: float = 90.0
) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(name, server_argv(server, port), log_dir, {"DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env})
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", proc, timeout=timeout)
    return proc, url


# --- load generators ---------------------------------------------------------------------


def loadgen(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run bench.loadgen with this spec to completion (bounded) and return its result."""
    result = subprocess.run(
        [PY, "-m", "bench.loadgen", orjson.dumps(spec).decode()],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(
            f"load generator ({spec.get('mode')}) failed with exit {result.returncode}:\n{result.stderr[-3000:]}"
        )
    return orjson.loads(result.stdout.strip().splitlines()[-1])


class Interactive:
    """A load generator driven over stdin (probe, hold): read its lines, tell it when to stop."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.popen = subprocess.Popen(
            [PY, "-m", "bench.loadgen", orjson.dumps(spec).decode()],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def read_line(self) -> dict[str, Any]:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            err = self.popen.stderr.read() if self.popen.stderr else ""
            raise RuntimeError(f"load generator ended without output:\n{err[-3000:]}")
        return orjson.loads(line)

    def finish(self, timeout: float = 60.0) -> dict[str, Any]:
        out, err = self.popen.communicate(input="stop\n", timeout=timeout)
        lines = out.strip().splitlines()
        if self.popen.returncode != 0 or not lines:
            raise RuntimeError(f"load generator failed with exit {self.popen.returncode}:\n{err[-3000:]}")
        return orjson.loads(lines[-1])

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = [==[%(body)s]==]
%(headers)s
%(vary)s
function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %%d, "duration_us": %%d, "bytes": %%d, "connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d, "p50_us": %%d, "p90_us": %%d, "p99_us": %%d, "max_us": %%d, "mean_us": %%f}\\n',
    summary.requests, summary.duration, summary.bytes, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
"""

# a different body per request: the marker becomes "<run tag>-<counter>" (every request a cache miss)
WRK_VARY = """
local head, tail = %(head)s, %(tail)s
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, head .. n .. tail)
end
"""


def _lua_string(text: str) -> str:
    return f"[==[{text}]==]"


def wrk(
    url: str,
    body: str,
    headers: dict[str, str],
    connections: int,
    duration_s: float,
    work: Path,
    vary: str | None = None,
) -> dict[str, Any]:
    """Throughput with wrk (C, one thread: the least CPU taken from the server under test).

    `vary`: a marker in `body` replaced by a per-request counter (a different body each time).
    """
    vary_lua = ""
    if vary:
        head, tail = body.split(vary, 1)
        tag = os.urandom(4).hex()
        vary_lua = WRK_VARY % {"head": _lua_string(f"{head}{tag}-"), "tail": _lua_string(tail)}
    header_lines = "\n".join(
        f'wrk.headers["{k}"] = [==[{v}]==]' for k, v in {"Content-Type": "application/json", **headers}.items()
    )
    script = work / f"wrk-{abs(hash((url, body, vary_lua))) % 10**8}.lua"
    script.write_text(WRK_SCRIPT % {"body": body, "headers": header_lines, "vary": vary_lua})
    argv = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 30)
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed with exit {result.returncode}: {result.stderr[-2000:]}")
    line = [x for x in result.stdout.splitlines() if x.startswith('{"requests"')]
    if not line:
        raise RuntimeError(f"wrk printed no summary:\n{result.stdout[-2000:]}")
    raw = orjson.loads(line[-1])
    seconds = raw["duration_us"] / 1e6
    errors = raw["connect"] + raw["read"] + raw["write"] + raw["status"] + raw["timeout"]
    return {
        "rps": round(raw["requests"] / seconds, 1) if seconds else 0.0,
        "requests": raw["requests"],
        "errors": errors,
        "non_2xx": raw["status"],
        "p50_ms": round(raw["p50_us"] / 1000, 3),
        "p99_ms": round(raw["p99_us"] / 1000, 3),
        "max_ms": round(raw["max_us"] / 1000, 3),
    }


def have_wrk() -> bool:
    from shutil import which

    return which("wrk") is not None
