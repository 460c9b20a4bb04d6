"""Real servers for end-to-end tests: the mock upstream and the gateway's ASGI server on loopback.

Each gateway gets its own database (a copy of a migrated SQLite file, or a
PostgreSQL database cloned from a migrated template when DATABASE_URL points at
PostgreSQL), is configured through `manage.py import_config` like an operator
would, and is served by a real server process: daphne, or uvicorn when
SWITCHBOARD_TEST_SERVER=uvicorn (CI runs one pass with each).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from gateway_project.servers import command

# The ASGI server the end-to-end tests run: daphne (the documented one) unless told otherwise.
SERVER = os.environ.get("SWITCHBOARD_TEST_SERVER", "daphne")

ROOT = Path(__file__).resolve().parents[2]

# What a loaded 2-core machine (CI, or developers sharing it) can add to any time measured
# from the test process: another process's start-up, a full-GC pause, the scheduler. Bounds
# that the product promises (a reload within 1 s, say) are asserted as promise + SLACK_S.
SLACK_S = 2.0

# A real SECRET_KEY for every test server: `manage.py serve` refuses the development one.
SECRET_KEY = "e2e-" + secrets.token_urlsafe(48)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(
    port: int, process: subprocess.Popen, timeout: float = 20.0, output: Callable[[], str] | None = None
) -> None:
    """Until something listens on `port`; a process that exits first, or never listens, fails with
    what it wrote (`output`), so the reason is in the test's failure, not in a file gone with it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}{_said(output)}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on {port} within {timeout}s{_said(output)}")


def _said(output: Callable[[], str] | None, limit: int = 6000) -> str:
    if output is None:
        return ""
    try:
        text = output()
    except OSError as exc:
        return f"; its output could not be read ({exc})"
    return f"; its output (last {limit} characters):\n{text[-limit:]}" if text else "; it wrote nothing"


def tied_to_this_run(argv: list[str]) -> list[str]:
    """`argv` started so that it gets SIGTERM if this test process dies without stopping it (a run
    ended by the hang backstop of tests/hangs.py, a cancelled CI job): no server outlives the run
    holding its port. Linux sends that signal when the *thread* that started the process ends, so
    only servers started from the main thread are tied; without util-linux's setpriv, `argv` as is."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


def end_process(process: subprocess.Popen, sig: int = signal.SIGTERM, within: float = 15.0) -> None:
    """Ask `process` to stop, wait at most `within` seconds, then kill it. Killed even when the wait
    is interrupted (a test's timeout firing in its teardown), so a stuck server never stays behind."""
    try:
        if process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=within)


class MockUpstream:
    """The project's mock upstream in its own process, scripted over its control API."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            tied_to_this_run([sys.executable, "-m", "tools.mock.upstream", "--port", str(self.port)]),
            cwd=ROOT,
        )
        wait_for_port(self.port, self.process)  # what it writes goes to the test's captured output
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def script(
        self, model: str, steps: list[dict] | None = None, then: dict | None = None, when: dict | None = None
    ) -> None:
        payload: dict = {"model": model, "steps": steps or []}
        if then is not None:
            payload["then"] = then
        if when is not None:
            payload["when"] = when
        self.client.post("/_control/script", json=payload).raise_for_status()

    def calls(self, model: str) -> dict:
        return self.client.get("/_control/calls", params={"model": model}).json()

    def count(self, model: str) -> int:
        return self.calls(model)["count"]

    def stop(self) -> None:
        self.client.close()
        end_process(self.process, within=10)


class Databases:
    """Fresh migrated databases for gateway processes, cloned from one migrated template."""

    def __init__(self) -> None:
        self.base_url = os.environ.get("DATABASE_URL", "")
        self.tmp = Path(tempfile.mkdtemp(prefix="switchboard-e2e-"))
        self.postgres = self.base_url.startswith(("postgres://", "postgresql://"))
        self.created: list[str] = []
        if self.postgres:
            self.template = f"sb_e2e_tpl_{uuid.uuid4().hex[:8]}"
            self._pg(f'CREATE DATABASE "{self.template}"')
            self.created.append(self.template)
            manage(["migrate", "-v0"], {"DATABASE_URL": self._pg_url(self.template)})
        else:
            self.template_file = self.tmp / "template.sqlite3"
            manage(["migrate", "-v0"], {"DATABASE_URL": f"sqlite:///{self.template_file}"})

    def _pg_url(self, name: str) -> str:
        parsed = urlparse(self.base_url)
        return parsed._replace(path=f"/{name}").geturl()

    def _pg(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(sql)

    def new(self) -> str:
        if self.postgres:
            name = f"sb_e2e_{uuid.uuid4().hex[:10]}"
            self._pg(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            self.created.append(name)
            return self._pg_url(name)
        path = self.tmp / f"{uuid.uuid4().hex[:10]}.sqlite3"
        shutil.copy(self.template_file, path)
        return f"sqlite:///{path}"

    def cleanup(self) -> None:
        if self.postgres:
            for name in reversed(self.created):
                try:
                    self._pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                except Exception:  # noqa: BLE001 - best effort
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def manage(
    args: list[str], env: dict[str, str], check: bool = True, input_text: str | None = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env}
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        input=input_text,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


@contextmanager
def migrated_postgres(server_url: str, prefix: str) -> Iterator[str]:
    """A new, migrated PostgreSQL database named `prefix_<random>` on `server_url`'s server; dropped afterwards."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urlparse(server_url)._replace(path=f"/{name}").geturl()
    try:
        manage(["migrate", "-v0"], {"DATABASE_URL": url})
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Gateway:
    """A running ASGI server (daphne or uvicorn) serving the gateway on its own database."""

    database_url: str
    config_yaml: str
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | None = None
    api_key: str = ""
    server: str = SERVER

    @property
    def env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": self.database_url,
            "SWITCHBOARD_USAGE_SPOOL_DIR": str(self.workdir / "spool"),
            "SWITCHBOARD_CONFIG_POLL_S": "0.2",
            "SECRET_KEY": SECRET_KEY,
            **self.extra_env,
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return manage(list(args), self.env, check=check)

    def import_config(self, yaml_text: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        path = self.workdir / f"config-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml_text)
        return self.manage("import_config", str(path), *extra, check=check)

    def create_key(self, org: str, agent: str) -> str:
        """A new key from `create_api_key` (another process); once serving, wait until the
        running server has reloaded and accepts it (promised within 1 s; SLACK_S on top)."""
        out = self.manage("create_api_key", "--org", org, "--agent", agent).stdout
        key = out.strip().splitlines()[-1].strip()
        if self.process is not None:
            created_at = time.monotonic()
            while httpx.get(f"{self.url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401:
                waited = time.monotonic() - created_at
                assert waited < 1.0 + SLACK_S, f"the running server did not accept a new key within {waited:.1f} s"
                time.sleep(0.02)
        return key

    def start(self, org: str = "acme", agent: str = "bot") -> None:
        self.import_config(self.config_yaml)
        self.api_key = self.create_key(org, agent)
        self.serve()

    def serve(self, argv: list[str] | None = None) -> None:
        """Start the server process on a free port: `argv` (given the port), default SERVER's command.

        A port found free may be taken by another process (other test runs share the machine)
        before the server binds it: then something else answers on it and this server exits.
        The server is ours when /health names its pid (single-process commands) and it still
        runs; otherwise it is started again on another port."""
        for attempt in range(3):
            self.port = free_port()
            self.log = open(self.workdir / "server.log", "w")  # noqa: SIM115
            self.process = subprocess.Popen(
                tied_to_this_run(
                    argv + ["--port", str(self.port)] if argv else command(self.server, "127.0.0.1", self.port)
                ),
                cwd=ROOT,
                env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **self.env},
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_for_port(self.port, self.process, output=self.logs)
                health = httpx.get(f"{self.url}/health", timeout=10)
                health.raise_for_status()
            except BaseException as exc:
                self.stop()
                if attempt < 2 and _port_taken(self.logs()):
                    continue  # another process bound the port first: another one
                if isinstance(exc, httpx.HTTPError):
                    raise RuntimeError(f"{self.url}/health failed ({exc}){_said(self.logs)}") from exc
                raise
            answered_by = health.headers.get("x-switchboard-worker")
            if self.process.poll() is None and (argv or answered_by == str(self.process.pid)):
                return
            self.stop()
            assert attempt < 2, f"port {self.port}: another process answered ({answered_by}), not {self.process.pid}"

    def second_process(self, env: dict[str, str]) -> Gateway:
        """Another server process on this one's database and configuration (one cluster), serving, with its key."""
        other = Gateway(
            database_url=self.database_url,
            config_yaml=self.config_yaml,
            workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-b-")),
            extra_env=env,
        )
        other.serve()
        other.api_key = self.api_key
        return other

    def logs(self) -> str:
        return (self.workdir / "server.log").read_text()

    def stop(self) -> None:
        try:
            if self.process is not None:
                end_process(self.process, within=15)
        finally:
            if getattr(self, "log", None):
                self.log.close()


def _port_taken(output: str) -> bool:
    """The server's own words for a port bound meanwhile by another process (daphne, uvicorn)."""
    lowered = output.lower()
    return "address already in use" in lowered or "errno 98" in lowered


class RedisServer:
    """A redis-server of the test's own on a free loopback port, so stopping it (an outage)
    touches nobody else's Redis. `stop()` then `start()` brings it back on the same port."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        if not self.binary:
            import pytest

            from tests.services import REDIS_MISSING

            pytest.skip(REDIS_MISSING)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(tied_to_this_run(argv), stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, self.process, output=self._output)
        except BaseException:
            self.stop()
            raise

    def _output(self) -> str:
        """What redis-server wrote so far (why it exited: a port taken, a bad flag)."""
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGCONT)  # a test may have paused it (SIGSTOP)
            end_process(self.process, within=10)
            self.log.close()
        self.process = None
