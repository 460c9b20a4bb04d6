"""Budgets on the in-process request path: reservation, 402, settlement, release (docs/limits.md#budgets)."""

from __future__ import annotations

import copy
import dataclasses

import httpx
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import document, key_rows

# $1 per million prompt tokens, $1000 per million completion tokens: max_tokens decides the worst case.
PRICES = {"input_price_per_mtok": 1.0, "output_price_per_mtok": 1000.0}
# The mock answers 12 prompt + 7 completion tokens: this much per request.
MOCK_COST = (12 * 1.0 + 7 * 1000.0) / 1e6


def chat(model: str = "chat-b", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def budgeted(gateway, upstream, monkeypatch):
    """Swap in a snapshot whose agent or org has a budget; fresh accounts; usage records captured."""
    records: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: records.append(row))
    current().budgets.forget()

    def apply(agent_budget=None, org_budget=None) -> list[dict]:
        doc = copy.deepcopy(document(upstream))
        doc["providers"].append({"name": "dead", "base_url": "http://127.0.0.1:9/v1"})
        doc["models"].append(
            {"id": "dead-chat", "provider": "dead", "upstream_model": "x", "capabilities": ["chat"], **PRICES}
        )
        for model in doc["models"]:
            if model["id"] == "chat-b":
                model.update(PRICES)
        org = doc["orgs"][0]
        if org_budget:
            org["budget"] = org_budget
        if agent_budget:
            org["agents"][0]["budget"] = agent_budget
        live.swap(build_snapshot(doc, key_rows(), {}, version=2))
        return records

    yield apply
    current().budgets.forget()


async def upstream_calls(upstream: str, model: str) -> int:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{upstream}/_control/calls", params={"model": model})).json()["count"]


async def test_a_request_whose_worst_case_does_not_fit_is_402_and_not_sent_upstream(gateway, budgeted, upstream):
    records = budgeted(agent_budget={"usd": 0.05, "period": "day"})
    before = await upstream_calls(upstream, "ip-chat-b")
    # Worst case of max_tokens=40: 40 × $1000/M = $0.04 (+ the prompt): fits once, then the real cost is settled.
    assert (await gateway.post("/v1/chat/completions", json=chat(max_tokens=40))).status_code == 200
    account = current().budgets.find(("agent", "acme", "bot"))
    assert account.spend() == pytest.approx(MOCK_COST) and account.reserved == 0
    # A $0.01 worst case fits while more than that is left: 5 more answers of $0.007012 (6 spent = $0.042).
    statuses = [(await gateway.post("/v1/chat/completions", json=chat(max_tokens=10))).status_code for _ in range(8)]
    assert statuses == [200] * 5 + [402] * 3
    assert account.spend() == pytest.approx(6 * MOCK_COST) and account.reserved == 0
    refused = await gateway.post("/v1/chat/completions", json=chat(max_tokens=10))
    assert refused.status_code == 402
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["type"] == "insufficient_quota"
    assert "agent 'acme/bot'" in error["message"] and "$0.05 budget" in error["message"]
    assert "resets in" in error["message"] and "lower max_tokens" in error["message"]
    # what was spent, in which period, and what is left (found by mutation testing: the 402's figures)
    assert f"has spent ${6 * MOCK_COST:.4f} of its $0.05 budget this day (UTC);" in error["message"]
    assert f"and ${0.05 - 6 * MOCK_COST:.6f} is left" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 86400
    assert await upstream_calls(upstream, "ip-chat-b") - before == 6
    assert [r["error_code"] for r in records].count("budget_exceeded") == 4
    assert records[-1]["status"] == 402 and records[-1]["attempts"] == 0


async def test_an_upstream_failure_releases_the_reservation(gateway, budgeted):
    budgeted(org_budget={"usd": 0.05, "period": "month"})
    failed = await gateway.post("/v1/chat/completions", json=chat("dead-chat", max_tokens=45))
    assert failed.status_code == 502
    account = current().budgets.find(("org", "acme"))
    assert account.reserved == 0 and account.spend() == 0
    # The whole budget is still there: a 45-token worst case fits again.
    assert (await gateway.post("/v1/chat/completions", json=chat(max_tokens=45))).status_code == 200


async def test_a_stream_is_settled_with_its_real_cost_when_it_ends(gateway, budgeted):
    budgeted(agent_budget={"usd": 1, "period": "total"})
    streamed = await gateway.post("/v1/chat/completions", json=chat(stream=True, max_tokens=900))
    assert streamed.status_code == 200
    account = current().budgets.find(("agent", "acme", "bot"))
    assert account.reserved == 0
    assert 0 < account.spend() < 0.1  # the real usage, not the $0.9 reservation


async def test_a_total_budget_says_it_does_not_reset(gateway, budgeted):
    budgeted(agent_budget={"usd": 0.001, "period": "total"})
    refused = await gateway.post("/v1/chat/completions", json=chat(max_tokens=10))
    assert refused.status_code == 402
    assert "retry-after" not in refused.headers
    assert "does not reset" in refused.json()["error"]["message"]


async def test_a_cache_hit_costs_the_budget_nothing(gateway, upstream, budgeted, monkeypatch):
    from routing.runtime.cache.response_cache import Coalescer, MemoryCache

    proc = current()
    monkeypatch.setattr(proc, "cache", MemoryCache())
    monkeypatch.setattr(proc, "coalescer", Coalescer())
    budgeted(agent_budget={"usd": 1, "period": "day"})
    snap = live.current()
    models = dict(snap.models)
    models["chat-b"] = dataclasses.replace(models["chat-b"], cache_ttl_s=60)
    live.swap(dataclasses.replace(snap, models=models, cache={}))
    body = chat(max_tokens=10, temperature=0)
    first = await gateway.post("/v1/chat/completions", json=body)
    hit = await gateway.post("/v1/chat/completions", json=body)
    assert first.headers["x-switchboard-cache"] == "miss" and hit.headers["x-switchboard-cache"] == "hit"
    account = proc.budgets.find(("agent", "acme", "bot"))
    assert account.spend() == pytest.approx(MOCK_COST) and account.reserved == 0  # only the miss was charged


@pytest.mark.parametrize(
    ("status", "usage", "cache", "served", "spent"),
    [
        (200, (1000, 2000), None, True, 0.0225),  # 1k in at $2.5/M + 2k out at $10/M
        (200, (1000, None), None, True, 0.0025),  # a prompt count alone is priced
        (200, (None, 2000), None, True, 0.02),  # and a completion count alone
        (200, (None, None), None, True, 0.5),  # no usage: the $0.50 reserved stands
        (200, (1000, 2000), None, False, 0.5),  # no serving link to price it: the reservation stands
        (502, (1000, 2000), None, True, 0.0),  # no answer: released
        (200, (1000, 2000), "hit", True, 0.0),  # from the response cache: costs nothing
        (200, (1000, 2000), "coalesced", True, 0.0),
    ],
    ids=["usage", "prompt-only", "completion-only", "no-usage", "no-link", "error", "cache-hit", "coalesced"],
)
def test_the_budget_reservation_is_settled_by_what_the_answer_was(status, usage, cache, served, spent):
    """Found by mutation testing (limiting.settle_budget): each rule of its docstring, exactly."""
    from dataclasses import replace

    from routing.core.budget_accounts import Budgets
    from routing.core.executor import Outcome
    from routing.gateway import limiting
    from routing.runtime.accounting import Context
    from tests.core.fakes import link

    budgets = Budgets(lambda: 1_780_000_000.0)
    hold = budgets.admit("acme", None, "bot", (5.0, "day"), 0.5)
    priced = link("chat-a")
    priced = replace(priced, model=replace(priced.model, input_price_per_mtok=2.5, output_price_per_mtok=10.0))
    ctx = Context("r", 0.0, "chat")
    ctx.status, (ctx.prompt_tokens, ctx.completion_tokens), ctx.cache = status, usage, cache
    ctx.outcome = Outcome(None, None, priced if served else None, 1, None, 0.0, [])
    limiting.settle_budget(hold, ctx)
    account = budgets.find(("agent", "acme", "bot"))
    assert account.reserved == 0.0
    assert account.spend() == pytest.approx(spent)
