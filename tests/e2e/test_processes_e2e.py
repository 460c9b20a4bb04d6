"""The dashboard's process list of one machine without Redis: `serve --workers 2` (docs/scale-out.md#processes).

Both workers are listed from the machine's shared directory, with worker indexes 0
and 1; a worker killed with SIGKILL is listed stale and its replacement takes its index;
the dashboard page in a headless Chromium renders the list.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from routing.runtime.cluster.process_list import STALE_BEATS
from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, needs_chromium
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


class Machine:
    """`serve --workers 2` without Redis, and a staff session on it."""

    def __init__(self, databases, mock_upstream) -> None:
        self.gw = Gateway(
            databases.new(),
            CONFIG.format(mock=mock_upstream.url),
            Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
            {"REDIS_URL": "", "SWITCHBOARD_HEARTBEAT_S": str(HEARTBEAT_S)},
        )
        self.gw.import_config(self.gw.config_yaml)
        manage(
            ["createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"],
            {**self.gw.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        )
        argv = [sys.executable, "manage.py", "serve", "--server", SERVER, "--workers", "2", "--host", "127.0.0.1"]
        try:
            self.gw.serve(argv)
        except BaseException:
            self.gw.stop()  # started but not listening in time: leave no server behind
            raise
        # a new connection per request: a kept-alive one would stay with (and die with) one worker
        self.staff = httpx.Client(base_url=self.gw.url, timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
        page = self.staff.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        self.staff.post(
            "/admin/login/",
            data={"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/dashboard/"},
        )
        wait_for(lambda: len(self.alive()) == 2, 10 + SLACK_S, "both workers listed alive")

    def listed(self) -> dict:
        answer = self.staff.get("/dashboard/processes/")
        assert answer.status_code == 200, answer.text[:300]
        return answer.json()

    def alive(self) -> dict[int, dict]:
        return {p["pid"]: p for p in self.listed()["processes"] if p["state"] == "alive"}

    def stop(self) -> None:
        self.staff.close()
        self.gw.stop()


@pytest.fixture(scope="module")
def machine(databases, mock_upstream) -> Iterator[Machine]:
    started = Machine(databases, mock_upstream)
    yield started
    started.stop()


def test_without_redis_the_list_shows_this_machines_workers_and_a_replaced_one(machine):
    data = machine.listed()
    assert data["source"] == "machine" and data["error"] is None
    workers = machine.alive()
    assert sorted(p["worker"] for p in workers.values()) == [0, 1]
    assert {p["server"] for p in workers.values()} == {SERVER}
    assert machine.gw.process.pid not in workers  # the workers, not the supervisor

    victim = next(pid for pid, p in workers.items() if p["worker"] == 0)
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        states = {p["pid"]: (p["state"], p["worker"]) for p in machine.listed()["processes"]}
        fresh = [pid for pid, (state, index) in states.items() if state == "alive" and index == 0 and pid != victim]
        return states.get(victim, ("stale",))[0] == "stale" and len(fresh) == 1

    wait_for(replaced, STALE_BEATS * HEARTBEAT_S + 15 + SLACK_S, "the killed worker stale, a new worker 0 alive")


@needs_chromium
def test_the_dashboard_page_shows_the_process_list(machine):
    from playwright.sync_api import sync_playwright

    wait_for(lambda: len(machine.alive()) == 2, 15 + SLACK_S, "two workers alive")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.add_cookies(
                [{"name": "sessionid", "value": machine.staff.cookies["sessionid"], "url": machine.gw.url}]
            )
            page = context.new_page()
            page.goto(f"{machine.gw.url}/dashboard/")
            page.wait_for_function(
                "document.querySelectorAll('#process-rows tr[data-state=alive]').length === 2", timeout=15_000
            )
            summary = page.inner_text("#process-summary")
            assert "2 alive" in summary and "this machine" in summary, summary
            rows = page.locator("#process-rows tr[data-state=alive]")
            assert sorted(rows.nth(i).locator("td").nth(4).inner_text() for i in range(2)) == ["0", "1"]
            assert page.locator("#process-error").is_hidden()
        finally:
            browser.close()
