"""One organisation's failures open only its own view of a shared link (docs/resilience.md#org-views).

Two orgs on one model served by the real mock upstream, which fails the requests of
org A only, while B uses the link too (scripted on the body's `user`, which the gateway forwards). A's requests
open A's view: A gets 503 `circuit_open` without an upstream call, while B is still
served by the same link and the shared breaker stays closed. When B's requests fail
as well, the link opens for both.
"""

from __future__ import annotations

import re

import httpx
import pytest

CONFIG = """
resilience:
  max_retries: 0
  breaker_failure_threshold: 3
  breaker_cooldown_s: 120
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: iso
    provider: mock
    upstream_model: up-iso
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""
THRESHOLD = 3
UPSTREAM = "up-iso"


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    # org names in /metrics labels, which the operator turns on (docs/security.md#metrics)
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_METRICS_ORG_NAMES": "true"})


@pytest.fixture(scope="module")
def keys(gw) -> dict[str, str]:
    return {"acme": gw.api_key, "beta": gw.create_key("beta", "bot")}


def chat(gw, key: str, user: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "iso", "user": user, "messages": [{"role": "user", "content": "hi"}]},
        timeout=20,
    )


def code(response: httpx.Response) -> str | None:
    return None if response.status_code == 200 else response.json()["error"]["code"]


def metric(gw, name: str, **labels: str) -> float | None:
    for line in httpx.get(f"{gw.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_one_orgs_failures_open_only_its_view_and_both_failing_open_the_link(gw, keys, mock_upstream):
    mock_upstream.script(UPSTREAM, [], then={"status": 500}, when={"field": "user", "equals": "user-of-acme"})
    # B uses the link too (were A the only org using it, A's failures would be an outage).
    assert chat(gw, keys["beta"], "user-of-beta").status_code == 200

    for _ in range(THRESHOLD):
        response = chat(gw, keys["acme"], "user-of-acme")
        assert response.status_code == 502 and code(response) == "upstream_error", response.text
    before = mock_upstream.count(UPSTREAM)
    refused = chat(gw, keys["acme"], "user-of-acme")
    assert refused.status_code == 503 and code(refused) == "circuit_open", refused.text
    assert mock_upstream.count(UPSTREAM) == before  # refused without an upstream call

    # B is served by the very same link, again and again, while A stays cut off.
    for _ in range(THRESHOLD * 2):
        served = chat(gw, keys["beta"], "user-of-beta")
        assert served.status_code == 200, served.text
        assert served.headers["x-switchboard-model-used"] == "iso"
        assert "x-switchboard-fallback" not in served.headers
    assert mock_upstream.count(UPSTREAM) == before + THRESHOLD * 2
    assert code(chat(gw, keys["acme"], "user-of-acme")) == "circuit_open"
    assert metric(gw, "switchboard_circuit_state", provider="mock", model="iso") == 0
    assert metric(gw, "switchboard_circuit_org_state", provider="mock", model="iso", org="acme") == 1

    # Now B's requests fail too: the failures come from two orgs, the link opens for everyone.
    mock_upstream.script(UPSTREAM, [], then={"status": 500}, when={"field": "user", "equals": "user-of-beta"})
    for _ in range(THRESHOLD):
        assert code(chat(gw, keys["beta"], "user-of-beta")) == "upstream_error"
    before = mock_upstream.count(UPSTREAM)
    for key, user in ((keys["beta"], "user-of-beta"), (keys["acme"], "user-of-acme")):
        response = chat(gw, key, user)
        assert response.status_code == 503 and code(response) == "circuit_open", response.text
    assert mock_upstream.count(UPSTREAM) == before
    assert metric(gw, "switchboard_circuit_state", provider="mock", model="iso") == 1
