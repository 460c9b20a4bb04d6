"""A deployment out of quota is parked (docs/errors.md#upstream): never retried, skipped without an upstream
call while parked (a fallback serves), at most one upstream call per park period, in the metric."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "errors"

CONFIG = """
resilience:
  max_retries: 2
  backoff_base_ms: 1
  backoff_max_ms: 5
  quota_park_s: 600
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
  - name: mock2
    dialect: openai
    base_url: {mock}/v1
models:
  - id: q-two
    routing: least_busy
    capabilities: [chat]
    deployments:
      - {{provider: mock, upstream_model: q-two-broke}}
      - {{provider: mock2, upstream_model: q-two-ok}}
  - id: q-broke
    provider: mock
    upstream_model: q-broke
    capabilities: [chat]
    fallbacks: [q-backup]
  - id: q-reset
    provider: mock
    upstream_model: q-reset
    capabilities: [chat]
    fallbacks: [q-backup]
  - id: q-badkey
    provider: mock
    upstream_model: q-badkey
    capabilities: [chat]
    fallbacks: [q-backup]
  - id: q-backup
    provider: mock
    upstream_model: q-backup
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


def chat(gw, model: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=20,
    )


def test_an_out_of_quota_deployment_costs_one_upstream_call_per_park_period(gw, mock_upstream) -> None:
    body = (FIXTURES / "openai_insufficient_quota.json").read_text()
    mock_upstream.script("q-broke", [], then={"status": 429, "body": body})
    before = mock_upstream.count("q-broke")
    for _ in range(6):
        answer = chat(gw, "q-broke")
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-switchboard-model-used"] == "q-backup"
        assert answer.headers["x-switchboard-fallback"] == "quota_exhausted"
    # one call (no retry of it), then skipped: max_retries 2 would have made 3 calls per request
    assert mock_upstream.count("q-broke") - before == 1
    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text
    assert 'switchboard_parked{model="q-broke",provider="mock"} 1.0' in metrics


def test_a_park_ends_at_the_reset_the_provider_gave_then_one_call_tries_again(gw, mock_upstream) -> None:
    body = (FIXTURES / "openai_insufficient_quota.json").read_text()
    mock_upstream.script("q-reset", [], then={"status": 429, "body": body, "headers": {"Retry-After": "1"}})
    before = mock_upstream.count("q-reset")
    assert chat(gw, "q-reset").status_code == 200
    assert chat(gw, "q-reset").status_code == 200
    assert mock_upstream.count("q-reset") - before == 1  # parked for the 1 s the provider said
    time.sleep(1.5)  # past the reset (not the operator's 600 s)
    assert chat(gw, "q-reset").status_code == 200
    assert mock_upstream.count("q-reset") - before == 2


def test_a_parked_deployment_is_skipped_for_the_models_other_deployment(gw, mock_upstream) -> None:
    body = (FIXTURES / "openai_insufficient_quota.json").read_text()
    mock_upstream.script("q-two-broke", [], then={"status": 429, "body": body})
    before = mock_upstream.count("q-two-broke")
    for _ in range(6):
        answer = chat(gw, "q-two")
        assert answer.status_code == 200, answer.text
    assert mock_upstream.count("q-two-broke") - before <= 1  # at most once, then parked


def test_refused_credentials_are_not_retried_the_link_shown_misconfigured_and_a_fallback_serves(gw, mock_upstream):
    body = (FIXTURES / "openai_invalid_api_key.json").read_text()
    mock_upstream.script("q-badkey", [], then={"status": 401, "body": body})
    before = mock_upstream.count("q-badkey")
    for _ in range(2):
        answer = chat(gw, "q-badkey")
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-switchboard-fallback"] == "authentication"
    assert mock_upstream.count("q-badkey") - before == 2  # one call a request: max_retries 2 does not apply
    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text
    assert 'switchboard_misconfigured{model="q-badkey",provider="mock"} 1.0' in metrics
    mock_upstream.script("q-badkey", [], then={"status": 200})  # the operator fixed the key
    assert chat(gw, "q-badkey").headers["x-switchboard-model-used"] == "q-badkey"
    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text
    assert 'switchboard_misconfigured{model="q-badkey",provider="mock"} 0.0' in metrics
