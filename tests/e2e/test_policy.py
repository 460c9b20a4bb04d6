"""Organisation policy, BYO credentials and idempotency end to end (docs/configuration.md#policies)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.e2e.harness import MockUpstream

CONFIG = """
resilience:
  max_retries: 0
  breaker_failure_threshold: 2
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
    api_key_env: SWITCHBOARD_UPSTREAM_PLATFORM
models:
  - id: chat-a
    provider: mock
    upstream_model: pol-chat-a
    capabilities: [chat]
    context_window: 100
    fallbacks: [vendor/blocked, chat-b]
  - id: chat-b
    provider: mock
    upstream_model: pol-chat-b
    capabilities: [chat]
    context_window: 100000
  - id: vendor/blocked
    provider: mock
    upstream_model: pol-blocked
    capabilities: [chat]
  - id: byo-model
    provider: mock
    upstream_model: pol-byo
    capabilities: [chat]
  - id: byo-brk
    provider: mock
    upstream_model: pol-byo-brk
    capabilities: [chat]
aliases:
  fast: chat-a
orgs:
  - name: acme
    agents:
      - name: bot
    policies:
      - pattern: "vendor/*"
        action: deny
        priority: 10
  - name: byo
    agents:
      - name: bot
    credentials:
      - provider: mock
        api_key_env: SWITCHBOARD_UPSTREAM_BYO
        base_url: {byo_mock}/v1
"""


@pytest.fixture(scope="module")
def byo_upstream():
    mock = MockUpstream()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream, byo_upstream):
    return make_gateway(
        CONFIG.format(mock=mock_upstream.url, byo_mock=byo_upstream.url),
        env={"SWITCHBOARD_UPSTREAM_PLATFORM": "sk-platform", "SWITCHBOARD_UPSTREAM_BYO": "sk-byo-secret"},
    )


def post(gw, key: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
        json=body,
        timeout=10,
    )


def ask(model: str, text: str = "hi") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


def test_denied_model_is_403_model_denied(gw):
    response = post(gw, gw.api_key, ask("vendor/blocked"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "model_denied"


def test_denied_hop_is_skipped_and_never_called(gw, mock_upstream):
    mock_upstream.script("pol-chat-a", [], then={"status": 503})
    response = post(gw, gw.api_key, ask("fast"))
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "chat-b"
    assert mock_upstream.count("pol-blocked") == 0
    mock_upstream.script("pol-chat-a", [], then={"status": 200})


def test_models_list_is_filtered_by_policy(gw):
    response = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {gw.api_key}"})
    ids = {item["id"] for item in response.json()["data"]}
    assert "vendor/blocked" not in ids
    assert {"chat-a", "chat-b", "byo-model", "fast"} <= ids


def test_prompt_too_long_for_the_primary_falls_back_to_a_larger_window(gw, mock_upstream):
    before = mock_upstream.count("pol-chat-a")
    response = post(gw, gw.api_key, ask("chat-a", "long words " * 400))
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "chat-b"
    assert response.headers["x-switchboard-fallback"] == "context_length"
    assert mock_upstream.count("pol-chat-a") == before  # skipped without an upstream call


def test_byo_request_uses_the_org_key_and_base_url(gw, mock_upstream, byo_upstream):
    byo_key = gw.create_key("byo", "bot")
    response = post(gw, byo_key, ask("byo-model"))
    assert response.status_code == 200
    received = byo_upstream.calls("pol-byo")["requests"][-1]
    headers = {k.lower(): v for k, v in received["headers"].items()}
    assert headers["authorization"] == "Bearer sk-byo-secret"
    assert mock_upstream.count("pol-byo") == 0


def test_byo_breaker_opens_without_opening_the_shared_one(gw, mock_upstream, byo_upstream):
    byo_key = gw.create_key("byo", "bot")
    # its own model: the open breaker must not leak into the other BYO tests, whatever their order
    byo_upstream.script("pol-byo-brk", [], then={"status": 500})
    for _ in range(2):
        post(gw, byo_key, ask("byo-brk"))
    assert post(gw, byo_key, ask("byo-brk")).json()["error"]["code"] == "circuit_open"
    shared = post(gw, gw.api_key, ask("byo-brk"))
    assert shared.status_code == 200
    assert shared.headers["x-switchboard-model-used"] == "byo-brk"


def test_idempotent_replay_and_conflict(gw, mock_upstream):
    key = f"idem-{uuid.uuid4().hex}"
    before = mock_upstream.count("pol-chat-b")
    first = post(gw, gw.api_key, ask("chat-b", "once"), {"Idempotency-Key": key})
    second = post(gw, gw.api_key, ask("chat-b", "once"), {"Idempotency-Key": key})
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert mock_upstream.count("pol-chat-b") == before + 1
    conflict = post(gw, gw.api_key, ask("chat-b", "another body"), {"Idempotency-Key": key})
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_key_reused"
