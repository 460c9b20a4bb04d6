"""Per-agent and per-org rate limits on one real server with the mock upstream (docs/limits.md)."""

from __future__ import annotations

import httpx
import pytest

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: lim-chat
    provider: mock
    upstream_model: lim-chat-up
    capabilities: [chat]
  - id: lim-org-chat
    provider: mock
    upstream_model: lim-org-up
    capabilities: [chat]
  - id: lim-free-chat
    provider: mock
    upstream_model: lim-free-up
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
        limits: {{rpm: 5}}
      - name: free
  - name: tight
    limits: {{tpm: 2000}}
    agents:
      - name: bot
"""

RATELIMIT_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
)


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


def post(gw, key: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, json=body, timeout=10
    )


def ask(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_agent_rpm_admits_five_then_refuses_without_calling_upstream(gw, mock_upstream):
    before = mock_upstream.count("lim-chat-up")
    refused_before = refused_total(gw, "agent", "rpm")
    answers = [post(gw, gw.api_key, ask("lim-chat")) for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert mock_upstream.count("lim-chat-up") - before == 5
    assert refused_total(gw, "agent", "rpm") == refused_before + 1

    first = answers[0]
    assert first.headers["x-ratelimit-limit-requests"] == "5"
    assert first.headers["x-ratelimit-remaining-requests"] == "4"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in first.headers  # no tpm limit on this caller

    refused = answers[-1]
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and error["type"] == "rate_limit_error"
    assert "acme/bot" in error["message"] and "rpm" in error["message"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["x-ratelimit-limit-requests"] == "5"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-request-id"]


def test_org_tpm_refuses_a_large_request_and_admits_a_small_one(gw, mock_upstream):
    key = gw.create_key("tight", "bot")
    before = mock_upstream.count("lim-org-up")
    refused_before = refused_total(gw, "org", "tpm")
    large = post(gw, key, ask("lim-org-chat", max_tokens=5000))
    assert large.status_code == 429
    assert large.json()["error"]["code"] == "rate_limited"
    assert "tpm 2000" in large.json()["error"]["message"]
    assert large.headers["x-ratelimit-limit-tokens"] == "2000"
    assert mock_upstream.count("lim-org-up") == before
    assert refused_total(gw, "org", "tpm") == refused_before + 1

    small = post(gw, key, ask("lim-org-chat", max_tokens=100))
    assert small.status_code == 200
    assert small.headers["x-ratelimit-limit-tokens"] == "2000"
    # Reserved: the prompt estimate + 100; corrected with the mock's real usage (19 tokens) afterwards.
    assert 1850 < int(small.headers["x-ratelimit-remaining-tokens"]) < 1900
    assert "x-ratelimit-limit-requests" not in small.headers
    assert mock_upstream.count("lim-org-up") == before + 1
    again = post(gw, key, ask("lim-org-chat", max_tokens=100))
    # The first was settled at 19 tokens: 2000 - 19 - this one's reservation; unsettled it would be below 1800.
    assert 1850 < int(again.headers["x-ratelimit-remaining-tokens"]) < 1900


def test_an_unlimited_agent_gets_no_ratelimit_headers(gw):
    key = gw.create_key("acme", "free")
    for _ in range(7):
        response = post(gw, key, ask("lim-free-chat"))
        assert response.status_code == 200
        assert not [h for h in response.headers if h.startswith("x-ratelimit-")]


def refused_total(gw, scope: str, limit: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    line = f'switchboard_rate_limited_total{{limit="{limit}",scope="{scope}"}} '
    return next(float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line))
