"""The dashboard's process list of one machine without Redis: `serve --workers 2` (docs/scale-out.md#processes).

Both workers are listed from the machine's shared directory, with worker indexes 0
and 1; a worker killed with SIGKILL is listed stale and its replacement takes its index.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

from routing.ops.dashboard.processes import STALE_BEATS
from tests.e2e.harness import SERVER, SLACK_S, Gateway, manage

HEARTBEAT_S = 0.2
PASSWORD = "processes-e2e-password"
CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: p-chat
    provider: mock
    upstream_model: processes-chat
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def wait_for(condition, within_s: float, what: str) -> None:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < within_s, f"{what}: not within {within_s:.1f} s"
        time.sleep(0.05)


def test_without_redis_the_list_shows_this_machines_workers_and_a_replaced_one(databases, mock_upstream):
    gw = Gateway(
        databases.new(),
        CONFIG.format(mock=mock_upstream.url),
        Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        {"REDIS_URL": "", "SWITCHBOARD_HEARTBEAT_S": str(HEARTBEAT_S)},
    )
    gw.import_config(gw.config_yaml)
    manage(
        ["createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"],
        {**gw.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    gw.serve([sys.executable, "manage.py", "serve", "--server", SERVER, "--workers", "2", "--host", "127.0.0.1"])
    # a new connection per request: a kept-alive one would stay with (and die with) one worker
    staff = httpx.Client(base_url=gw.url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
    try:
        page = staff.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        staff.post(
            "/admin/login/",
            data={"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/dashboard/"},
        )

        def listed() -> dict:
            answer = staff.get("/dashboard/processes/")
            assert answer.status_code == 200, answer.text[:300]
            return answer.json()

        def alive() -> dict[int, dict]:
            return {p["pid"]: p for p in listed()["processes"] if p["state"] == "alive"}

        wait_for(lambda: len(alive()) == 2, 10 + SLACK_S, "both workers listed alive")
        data = listed()
        assert data["source"] == "machine" and data["error"] is None
        workers = alive()
        assert sorted(p["worker"] for p in workers.values()) == [0, 1]
        assert {p["server"] for p in workers.values()} == {SERVER}
        assert gw.process.pid not in workers  # the workers, not the supervisor

        victim = next(pid for pid, p in workers.items() if p["worker"] == 0)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            states = {p["pid"]: (p["state"], p["worker"]) for p in listed()["processes"]}
            fresh = [pid for pid, (state, index) in states.items() if state == "alive" and index == 0 and pid != victim]
            return states.get(victim, ("stale",))[0] == "stale" and len(fresh) == 1

        wait_for(replaced, STALE_BEATS * HEARTBEAT_S + 15 + SLACK_S, "the killed worker stale, a new worker 0 alive")
    finally:
        staff.close()
        gw.stop()
