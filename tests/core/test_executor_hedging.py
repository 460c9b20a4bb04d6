"""Hedged first tokens in the executor (docs/overload.md#hedging): a late first deployment gets a
hedge to another, the first to commit wins and the other is cancelled at once."""

from __future__ import annotations

import asyncio
from typing import Any

from routing.config.snapshot import Resilience
from routing.core.admission_queue import Gates, PriorityTicket
from routing.core.breaker import BreakerRegistry
from routing.core.executor import Executor, Link
from routing.core.hedging import MIN_SAMPLES, Hedges, HedgeSettings
from routing.core.picking import Picker
from routing.core.retry_budget import RetryBudgets
from tests.core.deployments_fakes import multi

RES = Resilience(max_retries=0)


def setup(budget_pct: float = 100.0) -> tuple[Executor, Hedges, Link]:
    hedges = Hedges()
    hedges.configure({"m": HedgeSettings(budget_pct)})
    lk = multi("m", ("east", "west"), routing="weighted", weights=(1000, 1))  # east first, nearly always
    for t in lk.deployments:
        for _ in range(MIN_SAMPLES):
            hedges.observe(t.key, 0.02)  # p95 of first tokens: 20 ms
    ex = Executor(BreakerRegistry(), RetryBudgets(), picker=Picker(), gates=Gates(), hedges=hedges, rand=lambda: 0.0)
    return ex, hedges, lk


async def test_a_late_first_token_is_hedged_and_the_hedge_wins_and_the_slow_call_is_cancelled() -> None:
    ex, hedges, lk = setup()
    outcomes: list[str] = []
    hedges.on_outcome = outcomes.append
    cancelled: list[str] = []

    async def attempt(link: Link, deadline: float) -> str:
        name = link.model.provider.name
        try:
            await asyncio.sleep(5 if name == "east" else 0.01)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        return name

    ticket = PriorityTicket("acme", 1, 1.0, None, hedge=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await ex.run([lk], attempt, RES, loop.time() + 30, priority=ticket)
    assert out.error is None and out.result == "west"
    assert out.link.model.provider.name == "west" and out.attempts == 2
    assert cancelled == ["east"] and outcomes == ["won"]
    assert loop.time() - started < 5  # the slow call was not waited for
    assert ex.picker.peek(lk.deployments[0].key).in_flight == 0
    assert ex.picker.peek(lk.deployments[1].key).in_flight == 0


async def test_a_request_marked_non_idempotent_is_never_hedged() -> None:
    ex, _, lk = setup()
    calls: list[str] = []

    async def attempt(link: Link, deadline: float) -> str:
        calls.append(link.model.provider.name)
        await asyncio.sleep(0.1)
        return "ok"

    ticket = PriorityTicket("acme", 1, 1.0, None, hedge=False)
    loop = asyncio.get_running_loop()
    out = await ex.run([lk], attempt, RES, loop.time() + 30, priority=ticket)
    assert out.error is None and calls == ["east"]


async def test_hedges_stop_when_the_budget_is_spent() -> None:
    ex, hedges, lk = setup(budget_pct=10.0)
    calls: list[str] = []

    async def attempt(link: Link, deadline: float) -> Any:
        calls.append(link.model.provider.name)
        await asyncio.sleep(0.05)  # every call is past the 20 ms p95
        return "ok"

    ticket = PriorityTicket("acme", 1, 1.0, None, hedge=True)
    loop = asyncio.get_running_loop()
    for _ in range(30):
        await ex.run([lk], attempt, RES, loop.time() + 30, priority=ticket)
    extra = len(calls) - 30
    assert 1 <= extra <= 3  # 10 % of 30 requests


async def test_a_stream_that_lost_the_race_in_the_same_instant_is_closed() -> None:
    ex, _, lk = setup()
    closed: list[Any] = []
    gate = asyncio.Event()

    async def attempt(link: Link, deadline: float) -> str:
        await gate.wait()  # both commit together once the hedge is out
        return link.model.provider.name

    async def discard(result: Any) -> None:
        closed.append(result)

    ticket = PriorityTicket("acme", 1, 1.0, None, hedge=True)
    ticket.discard = discard
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(ex.run([lk], attempt, RES, loop.time() + 30, settle_later=True, priority=ticket))
    await asyncio.sleep(0.1)  # past the p95: the hedge is out
    gate.set()
    out = await task
    assert out.result == "east" and closed == ["west"]  # the first call wins a tie; the other is closed
    out.settlement.success()
    assert ex.picker.peek(lk.deployments[1].key).in_flight == 0
