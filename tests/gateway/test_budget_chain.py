"""A budget reservation prices the dearest link of the chain, not the first (docs/limits.md#reservation).

The primary here is cheap and down; its fallback costs 10× as much and answers. If only
the primary were priced, concurrent requests would each reserve a tenth of what they
spend and together overshoot the budget.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.gateway.limiting import RESERVE_PROMPT_FLOOR, worst_cost
from routing.plan import chain, preflight
from routing.runtime.process import current
from tests.gateway.conftest import document, key_rows

CHEAP = {"input_price_per_mtok": 0.1, "output_price_per_mtok": 100.0}
DEAR = {"input_price_per_mtok": 1.0, "output_price_per_mtok": 1000.0}  # 10× CHEAP
BUDGET_USD = 0.03
# The mock answers 12 prompt + 7 completion tokens: what one answer of the fallback costs.
DEAR_ANSWER = (12 * 1.0 + 7 * 1000.0) / 1e6


@pytest.fixture
def chained(gateway, upstream, monkeypatch):
    """cheap-chat (a dead provider) falls back to chat-b (the mock, 10× the prices); the agent has a budget."""
    monkeypatch.setattr(current().usage, "record", lambda **row: None)
    current().budgets.forget()
    doc = copy.deepcopy(document(upstream))
    doc["providers"].append({"name": "dead", "base_url": "http://127.0.0.1:9/v1"})
    doc["models"].append(
        {
            "id": "cheap-chat",
            "provider": "dead",
            "upstream_model": "x",
            "capabilities": ["chat"],
            "fallbacks": ["chat-b"],
            **CHEAP,
        }
    )
    next(m for m in doc["models"] if m["id"] == "chat-b").update(DEAR)
    doc["orgs"][0]["agents"][0]["budget"] = {"usd": BUDGET_USD, "period": "day"}
    live.swap(build_snapshot(doc, key_rows(), {}, version=2))
    yield live.current()
    current().budgets.forget()


def body(max_tokens: int = 10) -> dict:
    return {"model": "cheap-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


def test_the_worst_case_is_the_dearest_link_of_the_chain(chained):
    snap = chained
    org = snap.orgs["acme"]
    model = snap.resolve("cheap-chat")
    req = preflight.requirements("chat", body())
    links = preflight.apply(chain.build_chain(snap, org, model, "cheap-chat"), req)
    assert [link.model.id for link in links] == ["cheap-chat", "chat-b"]
    dear_only = preflight.apply(chain.build_chain(snap, org, snap.resolve("chat-b"), "chat-b"), req)
    assert worst_cost(links, req) == pytest.approx(worst_cost(dear_only, req))
    assert worst_cost(links, req) > 9 * worst_cost(links[:1], req)


async def test_concurrent_requests_falling_back_to_a_dearer_link_never_overshoot_the_budget(gateway, chained):
    statuses = [
        r.status_code
        for r in await asyncio.gather(*(gateway.post("/v1/chat/completions", json=body()) for _ in range(8)))
    ]
    account = current().budgets.find(("agent", "acme", "bot"))
    served = statuses.count(200)
    assert set(statuses) <= {200, 402} and served >= 1, statuses
    # Each answer costs DEAR_ANSWER, less than its reservation: the spend never passes the budget.
    assert account.spend() == pytest.approx(served * DEAR_ANSWER)
    assert account.spend() <= BUDGET_USD, f"{served} answers spent ${account.spend():.4f} of a ${BUDGET_USD} budget"
    assert account.reserved == 0


# Found by mutation testing (make mutation): the parts of the worst case the chain test leaves out.
def _one_link(snap, model_id: str, body: dict, kind: str = "chat"):
    req = preflight.requirements(kind, body)
    model = snap.resolve(model_id)
    return preflight.apply(chain.build_chain(snap, snap.orgs["acme"], model, model_id), req)[:1], req


def test_the_worst_case_prices_the_prompt_and_falls_back_to_the_models_output_limit(chained):
    import dataclasses

    snap = chained
    long_prompt = {"model": "chat-b", "messages": [{"role": "user", "content": "word " * 4000}], "max_tokens": 1}
    links, req = _one_link(snap, "chat-b", long_prompt)
    assert req.estimated_tokens > 1000
    # The prompt at $1/M and one output token at $1000/M: the prompt is most of it.
    assert worst_cost(links, req) == pytest.approx((req.estimated_tokens * 1.0 + 1000.0) / 1e6)
    # No max_tokens: the model's max_output_tokens, else 1024. A short prompt is reserved at the floor.
    links, req = _one_link(snap, "chat-b", {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]})
    assert req.estimated_tokens < RESERVE_PROMPT_FLOOR
    assert worst_cost(links, req) == pytest.approx((RESERVE_PROMPT_FLOOR + 1024 * 1000.0) / 1e6)
    capped = dataclasses.replace(links[0], model=dataclasses.replace(links[0].model, max_output_tokens=10))
    assert worst_cost([capped], req) == pytest.approx((RESERVE_PROMPT_FLOOR + 10 * 1000.0) / 1e6)


def test_an_embeddings_worst_case_is_its_input_alone(chained):
    import dataclasses

    links, req = _one_link(chained, "embed-a", {"model": "embed-a", "input": "word " * 100}, kind="embeddings")
    priced = dataclasses.replace(links[0], model=dataclasses.replace(links[0].model, **DEAR))
    assert worst_cost([priced], req) == pytest.approx(req.estimated_tokens * 1.0 / 1e6)  # no output tokens


def test_a_burst_of_short_prompts_on_a_budget_never_spends_past_it(chained):
    """The reservation's prompt floor: "hi" is estimated 5 tokens and billed 12 (the mock, as providers bill
    a role and the reply's priming). Reserved at the estimate, a burst admitted in full spent 0.7 % past the
    budget once each settled at its real cost; reserved at the floor, never."""
    from routing.core.budget_accounts import Budgets, request_cost

    links, req = _one_link(
        chained, "chat-b", {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    )
    billed = request_cost(DEAR["input_price_per_mtok"], DEAR["output_price_per_mtok"], 12, 1)
    worst = worst_cost(links, req)
    assert worst >= billed
    budgets = Budgets()
    holds = []
    while (hold := _admit(budgets, worst)) is not None:  # all in flight at once: none settled yet
        holds.append(hold)
    for hold in holds:
        hold.settle(billed)
    spent = budgets.find(("agent", "acme", "bot")).spend()
    assert len(holds) >= 90 and spent <= 0.1


def _admit(budgets, amount: float):
    from routing.core.budget_accounts import Exhausted

    try:
        return budgets.admit("acme", None, "bot", (0.1, "total"), amount)
    except Exhausted:
        return None
