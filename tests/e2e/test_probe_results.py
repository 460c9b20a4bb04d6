"""`manage.py probe_providers`, run in another process, reaches the running server:
its results show on /health/providers within a few seconds (stored in the database and
adopted by the server's prober, or published over Redis; docs/operations.md#shared-probe-results)."""

from __future__ import annotations

import os
import time

import httpx

from tests.e2e.harness import free_port

CONFIG = """
providers:
  - name: reachable
    dialect: openai
    base_url: {mock}/v1
  - name: unreachable
    dialect: openai
    base_url: http://127.0.0.1:{closed}/v1
models:
  - id: chat-r
    provider: reachable
    upstream_model: pr-chat
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def statuses(gw) -> dict[str, dict]:
    response = httpx.get(f"{gw.url}/health/providers", timeout=5)
    response.raise_for_status()
    return {p["name"]: p for p in response.json()["providers"]}


def test_probe_providers_from_another_process_reaches_the_running_server(make_gateway, mock_upstream):
    # Neither provider has health_probe and probes are off: the server never probes them itself.
    # With Redis (CI's PostgreSQL pass) the database poll is off, so the published results
    # must arrive over the channel layer; without it (the SQLite pass) through the rows.
    poll = "0" if os.environ.get("REDIS_URL") else "0.3"
    gw = make_gateway(
        CONFIG.format(mock=mock_upstream.url, closed=free_port()), env={"SWITCHBOARD_HEALTH_SHARED_POLL_S": poll}
    )
    before = statuses(gw)
    assert {name: p["status"] for name, p in before.items()} == {"reachable": "unknown", "unreachable": "unknown"}

    result = gw.manage("probe_providers", "--timeout", "2", check=False)
    assert result.returncode == 1, result.stderr  # one provider is down

    deadline = time.monotonic() + 5.0
    while True:
        now = statuses(gw)
        if now["reachable"]["status"] != "unknown" and now["unreachable"]["status"] != "unknown":
            break
        assert time.monotonic() < deadline, f"probe results did not reach the server within 5 s: {now}"
        time.sleep(0.1)
    assert now["reachable"]["status"] == "up" and now["reachable"]["latency_ms"] is not None
    assert now["unreachable"]["status"] == "down" and "cannot reach" in now["unreachable"]["detail"]
    assert now["reachable"]["checked_at"].endswith("Z")
