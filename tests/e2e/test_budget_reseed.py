"""Budgets that never reopen (docs/limits.md#reseed, #durable), on real processes sharing a real Redis:

- a Redis restarted empty (twice, under load) is reseeded from every process's usage records, so the
  cluster never spends past the budget by more than one request's worst case per process;
- a budget added live to an org that already spent in its period counts that spend in every process.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from decimal import Decimal
from itertools import cycle

import httpx
import pytest

from tests.e2e.harness import SLACK_S, Gateway, RedisServer
from tests.e2e.test_usage_e2e import usage_rows, wait_for

# $1 / $50 per million prompt / completion tokens. The mock answers 12 + 7 tokens: $0.000362 a request;
# with max_tokens 10 the worst case is 16 prompt (the reservation's floor) + 10 completion tokens: $0.000516.
CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: rs-chat
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 50
orgs:
  - name: {org}
{budget}    agents:
      - name: bot
"""
COST = Decimal("0.000362")
WORST = Decimal("0.000516")


def config(mock_upstream, org: str, upstream: str, budget: str = "") -> str:
    return CONFIG.format(mock=mock_upstream.url, org=org, upstream=upstream, budget=budget)


def ask(gw: Gateway, client: httpx.Client, key: str = "") -> httpx.Response:
    return client.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key or gw.api_key}"},
        json={"model": "rs-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
        timeout=20,
    )


def spent(gw: Gateway) -> Decimal:
    return sum((Decimal(str(r["cost"])) for r in usage_rows(gw.database_url) if r["cost"] is not None), Decimal(0))


@pytest.fixture
def make_cluster(make_gateway, mock_upstream):
    """Three processes of one cluster (one database) on a Redis of the test's own, which it may restart."""
    redis = RedisServer()
    started: list[Gateway] = []

    def make(budget: str) -> tuple[list[Gateway], RedisServer, str, str]:
        org, upstream = f"r{uuid.uuid4().hex[:8]}", f"rs-{uuid.uuid4().hex[:6]}"
        env = {"REDIS_URL": redis.url, "SWITCHBOARD_USAGE_FLUSH_S": "0.2"}
        a = make_gateway(config(mock_upstream, org, upstream, budget), org=org, env=env)
        started.extend(a.second_process(env) for _ in range(2))
        return [a, *started], redis, org, upstream

    yield make
    for gw in started:
        gw.stop()
    redis.stop()


def test_a_redis_restarted_empty_twice_under_load_never_reopens_the_budget(make_cluster, mock_upstream):
    gateways, redis, _, upstream = make_cluster("    budget: {usd: 0.01, period: day}\n")
    served: list[int] = []
    stop = threading.Event()

    def load() -> None:  # requests spread over the three processes, three at a time, until told to stop
        with httpx.Client() as client:
            for gw in cycle(gateways):
                if stop.is_set():
                    return
                served.append(ask(gw, client).status_code)

    workers = [threading.Thread(target=load) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: served.count(200) >= 12, 30, "about half of the budget spent")
        redis.stop()  # no persistence: it comes back empty
        redis.start()
        time.sleep(1.0)
        redis.stop()
        redis.start()
        # Every process must end on 402: the budget is spent, whatever Redis forgot.
        wait_for(lambda: served[-12:] == [402] * 12, 30, "the budget exhausted in every process")
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
    time.sleep(2.5)  # idle leases go back to the counter: what the budget still holds is served now
    with httpx.Client() as client:
        for gw in gateways * 4:
            served.append(ask(gw, client).status_code)
    gw = gateways[0]
    wait_for(lambda: len(usage_rows(gw.database_url)) >= len(served), 10, "every usage record written")
    total = spent(gw)
    assert mock_upstream.count(upstream) == served.count(200)
    # At most one request's worst case beyond the budget per process (each may be admitted on its
    # lease while the other's settle is still on its way), never the spend of other processes again.
    assert total <= Decimal("0.01") + len(gateways) * WORST, f"spent ${total} of $0.01 ({served.count(200)} served)"
    assert total >= Decimal("0.01") - len(gateways) * WORST - COST, f"refused too early: ${total}"
    logs = "".join(g.logs() for g in gateways)
    assert "rebuilt from the usage records" in logs


def test_a_budget_added_live_counts_the_spend_already_in_its_period_in_every_process(make_cluster, mock_upstream):
    gateways, _, org, upstream = make_cluster("")
    a = gateways[0]
    with httpx.Client() as client:  # spend without any budget
        assert [ask(gw, client).status_code for gw in gateways * 2] == [200] * 6
    wait_for(lambda: len(usage_rows(a.database_url)) >= 6, 10, "the records written")
    before = spent(a)
    assert before == 6 * COST
    # $0.0025: $0.002172 spent, $0.000328 left, less than one worst case ($0.000516).
    a.import_config(config(mock_upstream, org, upstream, "    budget: {usd: 0.0025, period: day}\n"))
    added = time.monotonic()
    key = a.create_key(org, "bot")  # accepted once a process has loaded the configuration with the budget
    for gw in gateways:
        while httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401:
            waited = time.monotonic() - added
            assert waited < 1.0 + SLACK_S, f"{gw.url} did not reload within {waited:.1f} s"
            time.sleep(0.02)
    with httpx.Client() as client:
        answers = [ask(gw, client, key) for gw in gateways]
    assert [r.status_code for r in answers] == [402] * 3, "a process ignored the spend already in the period"
    for answer in answers:  # the spend shown counts what other processes hold leased as spent
        message = answer.json()["error"]["message"]
        shown = re.search(rf"org '{org}' has spent \$([0-9.]+) of its \$0.0025 budget", message)
        assert shown and Decimal(shown.group(1)) >= Decimal("0.0021"), message
    assert spent(a) == before
