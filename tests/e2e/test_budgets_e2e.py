"""Budgets on real servers with the mock upstream: 402 before any upstream call, spend kept across a
restart, and one budget shared by two processes through a real Redis (docs/limits.md#budgets)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.e2e.harness import SLACK_S, Gateway

# $1 / $1000 per million prompt / completion tokens. The mock answers 12 + 7 tokens: $0.007012 a request;
# with max_tokens 10 the worst case is $0.010016 (its prompt reserved at the floor of 16 tokens).
CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: bud-chat
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
orgs:
  - name: {org}
    agents:
      - name: bot
        budget: {{usd: 0.035, period: total}}
      - name: rl
        limits: {{rpm: 10}}
"""
COST = 0.007012


def config(mock_upstream, org: str, upstream: str) -> str:
    return CONFIG.format(mock=mock_upstream.url, org=org, upstream=upstream)


def ask(gw: Gateway, key: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key or gw.api_key}"},
        json={"model": "bud-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
        timeout=20,
    )


def test_a_budget_admits_what_fits_then_402_and_a_restart_keeps_the_spend(make_gateway, mock_upstream):
    org, upstream = f"b{uuid.uuid4().hex[:8]}", f"bud-{uuid.uuid4().hex[:6]}"
    gw = make_gateway(config(mock_upstream, org, upstream), org=org, agent="bot", env={"REDIS_URL": ""})
    # 4 × $0.007012 = $0.028 spent; a 5th worst case ($0.01) does not fit in the $0.007 left.
    answers = [ask(gw) for _ in range(6)]
    assert [a.status_code for a in answers] == [200] * 4 + [402] * 2
    assert mock_upstream.count(upstream) == 4
    error = answers[-1].json()["error"]
    assert error["code"] == "budget_exceeded"
    assert f"agent '{org}/bot'" in error["message"]
    assert "$0.0280" in error["message"] and "does not reset" in error["message"]
    assert "retry-after" not in answers[-1].headers  # period: total never resets

    gw.stop()  # SIGTERM: the usage records are written
    gw.serve()
    again = ask(gw)
    assert again.status_code == 402, "the restarted process forgot the spend of the usage records"
    assert "$0.0280" in again.json()["error"]["message"]
    assert mock_upstream.count(upstream) == 4


@pytest.fixture
def two_processes(make_gateway, mock_upstream, redis_url):
    org, upstream = f"s{uuid.uuid4().hex[:8]}", f"bud-{uuid.uuid4().hex[:6]}"
    text = config(mock_upstream, org, upstream)
    shared = {"REDIS_URL": redis_url}
    a = make_gateway(text, org=org, agent="bot", env=shared)
    b = a.second_process(shared)
    yield a, b, upstream, org
    b.stop()


def test_one_budget_holds_across_two_processes_sharing_redis(two_processes, mock_upstream):
    a, b, upstream, _ = two_processes
    # Alternating requests: without sharing each process would admit 4 (8 in all).
    statuses = [ask(gw).status_code for gw in (a, b) * 4]
    served = statuses.count(200)
    assert set(statuses) == {200, 402}
    # Never more than the budget; at most one lease held by the other process refused too early.
    assert 3 <= served <= 4, statuses
    assert mock_upstream.count(upstream) == served

    # Spent on A, refused on B: B learns the spend within its sync interval; no more is ever served.
    deadline = time.monotonic() + 2 + SLACK_S  # leases idle for 2 s are given back
    while time.monotonic() < deadline and served < 4:
        served += ask(a).status_code == 200
        time.sleep(0.2)
    assert ask(b).status_code == 402
    assert ask(a).status_code == 402
    assert mock_upstream.count(upstream) == served <= 4

    b.stop()  # a restarted process keeps the spend (the usage records and the shared counter)
    b.serve()
    assert ask(b).status_code == 402
    assert mock_upstream.count(upstream) == served


def test_one_rpm_limit_holds_across_two_processes_sharing_redis(two_processes, mock_upstream):
    a, b, upstream, org = two_processes
    key = a.create_key(org, "rl")
    deadline = time.monotonic() + 1 + SLACK_S
    while httpx.get(f"{b.url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401:
        assert time.monotonic() < deadline, "B did not reload the new key"
        time.sleep(0.05)
    before = mock_upstream.count(upstream)
    answers = [ask(gw, key) for gw in (a, b) * 10]
    served = [r.status_code for r in answers].count(200)
    # Without sharing each process would serve 10 (20 in all). Shared: the cluster bucket's 10,
    # plus at most one share per process (shares of an rpm under 40 are 1 request), plus what
    # refills while the test runs (one request per 6 s).
    assert 10 <= served <= 12, [r.status_code for r in answers]
    assert mock_upstream.count(upstream) - before == served
    refused = [r for r in answers if r.status_code != 200]
    assert {r.json()["error"]["code"] for r in refused} == {"rate_limited"}
    assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
    assert all(r.headers["x-ratelimit-limit-requests"] == "10" for r in answers)
