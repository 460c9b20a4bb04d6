"""The test harness itself (docs/testing.md#hangs): a server that fails to start says why, no
server outlives its test or the run, and a hung test fails with its name while the run goes on."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.e2e.harness import ROOT, Gateway, end_process


def test_a_server_that_exits_before_listening_fails_with_what_it_wrote(tmp_path: Path) -> None:
    gw = Gateway(database_url="sqlite:///unused", config_yaml="", workdir=tmp_path)
    crash = [sys.executable, "-c", "import sys; print('refusing to start: SECRET_KEY is missing'); sys.exit(1)"]
    with pytest.raises(RuntimeError) as failed:
        gw.serve(crash)
    assert "process exited with 1 before listening" in str(failed.value)
    assert "refusing to start: SECRET_KEY is missing" in str(failed.value)
    assert gw.process is not None and gw.process.poll() is not None


def test_a_process_that_ignores_sigterm_is_killed_within_the_bound() -> None:
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]
    )
    time.sleep(0.3)  # let it install its handler (the kill must come either way)
    started = time.monotonic()
    end_process(stubborn, within=0.5)
    assert stubborn.returncode == -signal.SIGKILL and time.monotonic() - started < 5


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_a_server_dies_with_the_test_process_that_started_it(tmp_path: Path) -> None:
    """The run ended hard (the hang backstop's os._exit, a killed CI job): its servers get SIGTERM."""
    pid_file = tmp_path / "pid"
    parent = f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.e2e.harness import tied_to_this_run
        server = subprocess.Popen(tied_to_this_run([sys.executable, "-c", "import time; time.sleep(60)"]))
        open({str(pid_file)!r}, "w").write(str(server.pid))
        time.sleep(60)
    """
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(parent)])
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    server = int(pid_file.read_text())
    runner.kill()
    runner.wait()
    while time.monotonic() < deadline:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{server}/stat").read_text().split(") ")[1].startswith("Z"):
            return  # gone, not yet reaped by init
        time.sleep(0.05)
    os.kill(server, signal.SIGKILL)
    raise AssertionError("the server outlived the process that started it")


HANGING = """
import asyncio
import pytest


async def _stubborn():
    while True:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            pass  # swallowed, as a client library can


@pytest.fixture
async def stubborn_task():
    task = asyncio.create_task(_stubborn())
    yield task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # never ends


async def test_awaits_forever():
    await asyncio.Event().wait()


async def test_its_teardown_hangs(stubborn_task):
    pass


def test_runs_after():
    pass
"""


def test_a_hung_test_and_a_hung_teardown_fail_with_their_names_and_the_run_goes_on(tmp_path: Path) -> None:
    """With this suite's timeout settings (pyproject.toml, tests/hangs.py) on a 1 s timeout."""
    (tmp_path / "test_hangs.py").write_text(HANGING)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\ntimeout = 1\ntimeout_method = signal\ntimeout_teardown_grace = 1\n"
    )
    argv = [sys.executable, "-m", "pytest", "-p", "tests.hangs", "-p", "no:django", "-p", "no:randomly"]
    argv += ["-p", "no:cacheprovider", "-q", "-rfE", str(tmp_path)]
    started = time.monotonic()
    run = subprocess.run(
        argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - started
    out = run.stdout + run.stderr
    assert "FAILED test_hangs.py::test_awaits_forever - Failed: Timeout" in out, out
    assert "ERROR test_hangs.py::test_its_teardown_hangs" in out, out
    assert re.search(r"\b1 failed, 2 passed, (\d+ warnings?, )?1 error\b", out), out  # test_runs_after ran
    assert "INTERNALERROR" not in out, out
    assert took < 60, f"{took:.0f} s"
