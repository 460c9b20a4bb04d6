"""`make cluster` / `make cluster-down` (tools.local_cluster) as an operator runs them.

`up` on the running PostgreSQL and Redis (its own database and db index, as on a
machine where they already run), two replicas behind HAProxy on free ports: the key
it prints works through the balancer and both replicas answer; `down` stops every
process it started. Needs PostgreSQL + Redis (the fixtures) + haproxy like test_cluster_haproxy.py.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.harness import ROOT, SERVER
from tools.local_cluster import running

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)

pytestmark = pytest.mark.skipif(not HAPROXY, reason="make cluster NOT tested: needs haproxy (apt-get install haproxy)")


def test_cluster_up_prints_a_working_key_and_down_stops_everything(postgres_url, redis_url):
    redis = urlparse(redis_url)
    state_dir = Path(tempfile.mkdtemp(prefix="switchboard-make-cluster-"))
    database = f"sb_e2e_mkcluster_{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CLUSTER_STATE_DIR": str(state_dir),
        "CLUSTER_PG_URL": postgres_url,
        "CLUSTER_PG_DATABASE": database,
        "CLUSTER_REDIS_PORT": str(redis.port or 6379),
        "CLUSTER_REDIS_DB": (redis.path or "/0").lstrip("/") or "0",
    }
    for name in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)  # the cluster names its own
    port = _port_block(5)  # HAProxy, the two replicas after it, the mock, the stats page
    args = ["--port", str(port), "--replicas", "2", "--workers", "1", "--server", SERVER]
    args += ["--mock-port", str(port + 3), "--stats-port", str(port + 4)]

    def cluster(*verb: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tools.local_cluster", *verb],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )

    up = None
    try:
        up = cluster("up", *args)
        assert up.returncode == 0, up.stdout + up.stderr
        key = next(line.split("=", 1)[1] for line in up.stdout.splitlines() if "export KEY=" in line)
        assert f"gateway    http://127.0.0.1:{port}" in up.stdout and "user: admin   password: " in up.stdout
        state = json.loads((state_dir / "state.json").read_text())
        assert set(state["replicas"]) == {"replica1", "replica2"}
        seen = set()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            for _ in range(4):
                answer = client.post(
                    "/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": "fast", "messages": [{"role": "user", "content": "Hello"}]},
                )
                assert answer.status_code == 200, answer.text
                seen.add(answer.headers["x-switchboard-replica"])
        assert seen == {"replica1", "replica2"}
        again = cluster("up", *args)
        assert again.returncode == 1 and "already up" in again.stderr
    finally:
        down = cluster("down")
        if up is not None and up.returncode == 0:
            assert down.returncode == 0 and "cluster stopped" in down.stdout, down.stdout + down.stderr
            pids = [r["pid"] for r in state["replicas"].values()] + [p for p in state["pids"].values() if p]
            assert not [pid for pid in pids if running(pid)]
            assert not (state_dir / "state.json").exists()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(state_dir, ignore_errors=True)


def _port_block(size: int) -> int:
    """The first of `size` free consecutive ports below the kernel's ephemeral range.

    Replica ports follow HAProxy's (port + 1, + 2), and the cluster binds them seconds
    after this check, once it has migrated and imported over many connections. Inside the
    ephemeral range any of those can take one as its source port, and a port in use as a
    source port cannot be bound for listening (EADDRINUSE). CI once saw a replica not
    come up within 60 s; its log was not kept, and this is the race that can do it.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100):  # bounded
        first = rng.randrange(max(1024, low - 12_000), low - size)
        if all(_bindable(first + i) for i in range(size)):
            return first
    raise AssertionError(f"no {size} free consecutive ports below {low}")


def _bindable(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
