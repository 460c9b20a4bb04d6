"""A hung Redis (SIGSTOP) must not hold a configuration save: the broadcast is bounded.

The test starts a redis-server of its own on a free port, so pausing it touches
nobody else's Redis.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.harness import free_port, manage, wait_for_port
from tests.services import REDIS_MISSING

CONFIG = """
providers:
  - name: mock
    base_url: http://127.0.0.1:9/v1
models:
  - id: m-{n}
    provider: mock
    upstream_model: up
    capabilities: [chat]
"""


@pytest.fixture
def own_redis():
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip(REDIS_MISSING)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield process, f"redis://127.0.0.1:{port}/0"
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)


def test_import_config_returns_within_seconds_while_redis_is_paused(own_redis):
    process, redis_url = own_redis
    workdir = Path(tempfile.mkdtemp(prefix="switchboard-redis-"))
    env = {"DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}", "REDIS_URL": redis_url}
    manage(["migrate", "-v0"], env)

    def import_config(n: int) -> tuple[subprocess.CompletedProcess, float]:
        path = workdir / f"config-{n}.yaml"
        path.write_text(CONFIG.format(n=n))
        started = time.monotonic()
        result = manage(["import_config", str(path)], env, check=False)
        return result, time.monotonic() - started

    baseline, baseline_s = import_config(1)  # Redis answering: the broadcast goes out
    assert baseline.returncode == 0, baseline.stderr

    process.send_signal(signal.SIGSTOP)
    result, elapsed = import_config(2)
    assert result.returncode == 0, result.stderr
    assert elapsed < baseline_s + 4, f"import_config took {elapsed:.1f}s with Redis paused ({baseline_s:.1f}s before)"
    assert "broadcast failed" in result.stderr  # said once why other processes reload by polling
    shutil.rmtree(workdir, ignore_errors=True)
