"""Force-open / reset stored in the database (docs/scale-out.md#controls), with real servers and no Redis.

`manage.py breaker` with no REDIS_URL writes the breaker's override and bumps the
configuration version: a server already running refuses the link within its poll
interval, a server started afterwards refuses it from its first request, and a reset
closes it in both.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Gateway

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: ctl-a
    provider: mock
    upstream_model: ctl-a
    capabilities: [chat]
  - id: ctl-b
    provider: mock
    upstream_model: ctl-b
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

NO_REDIS = {"REDIS_URL": "", "SWITCHBOARD_CONFIG_POLL_S": "0.5"}


def chat(gw: Gateway, model: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


def code(response: httpx.Response) -> str | None:
    return response.json().get("error", {}).get("code") if response.status_code != 200 else None


def wait_for(gw: Gateway, model: str, status: int, within_s: float) -> float:
    """Seconds until `model` answers `status` on gw (fails after within_s)."""
    start = time.monotonic()
    while True:
        response = chat(gw, model)
        if response.status_code == status:
            return time.monotonic() - start
        assert time.monotonic() - start < within_s, f"{gw.url}: still {response.status_code} {response.text}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env=NO_REDIS)


def test_force_open_from_the_cli_reaches_running_and_later_servers_and_reset_closes_both(gw, mock_upstream):
    assert chat(gw, "ctl-a").status_code == 200
    result = gw.manage("breaker", "force-open", "mock", "ctl-a", "--reason", "db maintenance")
    assert "stored for mock/ctl-a" in result.stdout

    took = wait_for(gw, "ctl-a", 503, within_s=2.0)
    refused = chat(gw, "ctl-a")
    assert code(refused) == "circuit_open", refused.text
    assert chat(gw, "ctl-b").status_code == 200  # only that link
    calls = mock_upstream.count("ctl-a")

    later = Gateway(gw.database_url, "", Path(tempfile.mkdtemp(prefix="switchboard-gw-")), dict(NO_REDIS))
    later.api_key = gw.api_key
    later.serve()
    try:
        first = chat(later, "ctl-a")  # its very first request: the stored force-open already holds
        assert first.status_code == 503 and code(first) == "circuit_open", first.text
        assert mock_upstream.count("ctl-a") == calls  # neither server called the upstream

        gw.manage("breaker", "reset", "mock", "ctl-a")
        wait_for(gw, "ctl-a", 200, within_s=2.0)
        wait_for(later, "ctl-a", 200, within_s=2.0)
    finally:
        later.stop()
    assert took < 2.0
