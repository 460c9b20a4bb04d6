"""The PostgreSQL and Redis servers of tests that need real ones (docs/testing.md#services).

A test asks for the `postgres_url` or `redis_url` fixture (tests/conftest.py), never
for an environment variable. The URL comes from the environment when it names a
server (CI's `.ci/run` sets SWITCHBOARD_TEST_POSTGRES_URL / SWITCHBOARD_TEST_REDIS_URL);
otherwise the first test that needs one starts a throwaway server from the binaries
on the machine, on a free loopback port in a temporary directory, kept for the
session and removed at its end. Without the binaries the test is skipped with one
reason that says what to install. So `make test` in a fresh clone runs green with
nothing set.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.harness import RedisServer, end_process, free_port, tied_to_this_run, wait_for_port

POSTGRES_ROLE = "switchboard"
POSTGRES_MISSING = (
    "needs PostgreSQL: no server in SWITCHBOARD_TEST_POSTGRES_URL and no initdb/postgres binaries "
    "(/usr/lib/postgresql/*/bin) to start one (apt-get install postgresql)"
)
REDIS_MISSING = (
    "needs Redis: no server in SWITCHBOARD_TEST_REDIS_URL / REDIS_URL and no redis-server binary "
    "to start one (apt-get install redis-server)"
)


def configured_redis_url() -> str:
    return os.environ.get("SWITCHBOARD_TEST_REDIS_URL") or os.environ.get("REDIS_URL", "")


def configured_postgres_url() -> str:
    """The PostgreSQL server the environment names (a URL whose database the tests never use themselves)."""
    url = os.environ.get("SWITCHBOARD_TEST_POSTGRES_URL", "")
    database = os.environ.get("DATABASE_URL", "")
    if not url and database.startswith(("postgres://", "postgresql://")):
        url = database
    return url


def postgres_bin() -> Path | None:
    """The newest PostgreSQL's binaries directory (Debian's layout), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: [int(x) for x in p.split("/")[4].split(".") if x.isdigit()],
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def redis_binary() -> str | None:
    return shutil.which("redis-server")


class ThrowawayPostgres:
    """`initdb` + `postgres` in a temporary directory, on a free loopback port, trust auth.

    PostgreSQL refuses to run as root, so under root the server runs as the `postgres`
    user (Debian's package creates it), else `nobody`, in a directory that user owns.
    """

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="switchboard-pg-"))
        self.data = self.dir / "data"
        self.user = self._run_as()
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.url = f"postgres://{POSTGRES_ROLE}:{POSTGRES_ROLE}@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen | None = None
        self._initdb()
        self._start()

    @staticmethod
    def _run_as() -> pwd.struct_passwd | None:
        if os.geteuid() != 0:
            return None
        for name in ("postgres", "nobody"):
            try:
                return pwd.getpwnam(name)
            except KeyError:
                continue
        raise RuntimeError("running as root and neither a postgres nor a nobody user exists to run PostgreSQL")

    def _user_args(self) -> dict:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        argv = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", POSTGRES_ROLE, "--auth=trust"]
        argv += ["--no-sync", "--no-locale", "-E", "UTF8"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=self.dir, **self._user_args())
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def _start(self) -> None:
        argv = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir)]
        argv += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"]
        argv += ["-c", "full_page_writes=off", "-c", "max_connections=200"]
        self.log = open(self.dir / "postgres.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            tied_to_this_run(argv),
            cwd=self.dir,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._user_args(),
        )
        try:
            wait_for_port(self.port, self.process, timeout=60)
            self._wait_ready()
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{(self.dir / 'postgres.log').read_text(errors='replace')}") from exc

    def _wait_ready(self) -> None:
        """The port opens before the server accepts sessions (it may still be starting up)."""
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            end_process(self.process, signal.SIGINT, within=30)  # fast shutdown: ends the sessions tests left open
        self.process = None
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def postgres_server() -> tuple[str, ThrowawayPostgres | None]:
    """(server URL, the throwaway server to stop or None); skips the test when there is no way to get one."""
    url = configured_postgres_url()
    if url:
        return url, None
    bindir = postgres_bin()
    if bindir is None or not (bindir / "postgres").exists():
        pytest.skip(POSTGRES_MISSING)
    server = ThrowawayPostgres(bindir)
    return server.url, server


def redis_server() -> tuple[str, RedisServer | None]:
    """(Redis URL, the throwaway server to stop or None); skips the test when there is no way to get one."""
    url = configured_redis_url()
    if url:
        return url, None
    if redis_binary() is None:
        pytest.skip(REDIS_MISSING)
    server = RedisServer()
    return server.url, server
