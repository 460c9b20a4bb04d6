"""A key made over the management API, on two real gateway processes sharing one Redis and one database
(docs/management-api.md, docs/limits.md#keys): its rpm, budget, model list and expiry hold for the
cluster; rotation's grace, revocation within the reload bound, and If-Match between two writers."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.e2e.harness import SLACK_S, Gateway

# gpt-priced costs exactly its worst case: max_tokens 7 and the mock's 7 completion tokens at $40 per
# million, no input price: $0.00028 a request, 3 of them fit in $0.001 and a 4th does not.
CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: chat-free
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
  - id: gpt-free
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
  - id: gpt-priced
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
    output_price_per_mtok: 40
  - id: other-model
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
aliases:
  fast: chat-free
orgs:
  - name: {org}
    agents:
      - name: bot
"""
RELOAD_BOUND_S = 1.0


@pytest.fixture
def cluster(make_gateway, mock_upstream, redis_url):
    """Two gateway processes on one database and one Redis, a write token, and the org's name."""
    org = f"k{uuid.uuid4().hex[:8]}"
    text = CONFIG.format(mock=mock_upstream.url, upstream=f"keys-{uuid.uuid4().hex[:6]}", org=org)
    first = make_gateway(text, org=org, agent="bot", env={"REDIS_URL": redis_url})
    second = first.second_process({"REDIS_URL": redis_url})
    out = first.manage("create_management_token", "--name", f"e2e-{org}", "--scope", "write").stdout
    api = httpx.Client(
        base_url=f"{first.url}/api/v1", headers={"Authorization": f"Bearer {out.strip().splitlines()[-1]}"}, timeout=30
    )
    yield [first, second], api, org
    api.close()
    second.stop()


def ask(gw: Gateway, key: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7},
        timeout=30,
    )


def served_everywhere(gateways: list[Gateway], secret: str, since: float) -> float:
    """Seconds until every process accepts `secret` (GET /v1/models), failing past the reload bound."""
    for gw in gateways:
        while httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code == 401:
            assert time.monotonic() - since < RELOAD_BOUND_S + SLACK_S, "a process did not take the new key"
            time.sleep(0.02)
    return time.monotonic() - since


def refused_everywhere(gateways: list[Gateway], secret: str, since: float) -> float:
    for gw in gateways:
        while ask(gw, secret, "fast").status_code != 401:
            assert time.monotonic() - since < RELOAD_BOUND_S + SLACK_S, "a process still serves the key"
            time.sleep(0.02)
    return time.monotonic() - since


def test_a_keys_rpm_budget_models_and_expiry_hold_on_two_processes(cluster):
    gateways, api, org = cluster
    expires = datetime.now(UTC) + timedelta(seconds=5)
    asked = time.monotonic()
    created = api.post(
        "/keys",
        json={
            "org": org,
            "agent": "bot",
            "limits": {"rpm": 10},
            "budget": {"usd": 0.001, "period": "day"},
            "models": ["fast", "gpt-*"],
            "expires_at": expires.isoformat(),
        },
    )
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    served_everywhere(gateways, secret, asked)
    gw = lambda i: gateways[i % 2]  # noqa: E731 - alternate the two processes

    priced = [ask(gw(i), secret, "gpt-priced") for i in range(4)]  # 3 fit the budget, the 4th does not
    assert [a.status_code for a in priced] == [200, 200, 200, 402], [a.text for a in priced]
    assert (
        priced[-1].json()["error"]["code"] == "budget_exceeded" and "API key" in priced[-1].json()["error"]["message"]
    )

    for model in ("other-model", "chat-free"):  # outside the list (chat-free only by its alias): 403, no rpm used
        denied = ask(gw(0), secret, model)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "model_denied", denied.text

    # 4 of the 10 requests a minute are used (the refused one counts: it was admitted by the rate limit)
    free = [ask(gw(i), secret, "fast" if i % 2 else "gpt-free") for i in range(7)]
    assert [a.status_code for a in free] == [200] * 6 + [429], [a.text for a in free]
    assert free[-1].json()["error"]["code"] == "rate_limited"
    assert datetime.now(UTC) < expires, "the machine was too slow: the key expired during the checks"

    while datetime.now(UTC) < expires:
        time.sleep(0.05)
    for process in gateways:  # the clock alone: no configuration change is needed for expiry
        expired = ask(process, secret, "fast")
        assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"], expired.text


def test_rotation_keeps_the_old_secret_for_its_grace_and_revocation_reaches_every_process(cluster):
    gateways, api, org = cluster
    key = api.post("/keys", json={"org": org, "agent": "bot"}).json()
    old = key["secret"]
    served_everywhere(gateways, old, time.monotonic())
    asked = time.monotonic()
    rotated = api.post(f"/keys/{key['id']}/rotate", json={"grace_seconds": 3})
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    grace_ends = asked + 3
    served_everywhere(gateways, new, asked)
    for process in gateways:
        assert ask(process, old, "fast").status_code == 200  # within its grace
        assert ask(process, new, "fast").status_code == 200
    while time.monotonic() < grace_ends:
        time.sleep(0.05)
    for process in gateways:
        after = ask(process, old, "fast")
        assert after.status_code == 401 and "rotated" in after.json()["error"]["message"], after.text
        assert ask(process, new, "fast").status_code == 200

    asked = time.monotonic()
    assert api.post(f"/keys/{key['id']}/revoke").status_code == 200
    took = refused_everywhere(gateways, new, asked)
    assert took < RELOAD_BOUND_S + SLACK_S


def test_two_concurrent_updates_with_one_etag_one_succeeds_one_gets_412(cluster):
    gateways, api, org = cluster
    key = api.post("/keys", json={"org": org, "agent": "bot"}).json()
    tag = api.get(f"/keys/{key['id']}").headers["ETag"]
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def update(rpm: int) -> None:
        barrier.wait()
        answer = api.patch(f"/keys/{key['id']}", json={"limits": {"rpm": rpm}}, headers={"If-Match": tag})
        statuses.append(answer.status_code)

    threads = [threading.Thread(target=update, args=(n,)) for n in (5, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 412]
