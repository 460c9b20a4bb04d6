"""The executor's calls through a deployment's gate (docs/overload.md): in-flight bound, signals, streams."""

from __future__ import annotations

import asyncio
from typing import Any

from routing.config.snapshot import Resilience
from routing.core.admission_queue import PRIORITIES, Gates, PriorityTicket
from routing.core.breaker import BreakerRegistry
from routing.core.concurrency import LimitSettings
from routing.core.executor import Executor, Link
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.retry_budget import RetryBudgets
from tests.core.fakes import link

RES = Resilience(max_retries=0)


def executor(gates: Gates) -> Executor:
    return Executor(BreakerRegistry(), RetryBudgets(), gates=gates)


def gates_for(model_id: str, **kw: Any) -> Gates:
    g = Gates()
    g.configure({model_id: LimitSettings(**{"initial": 2, "max_limit": 2, **kw})})
    return g


async def test_requests_in_flight_to_a_deployment_never_exceed_its_limit() -> None:
    gates = gates_for("m")
    ex = executor(gates)
    inflight = peak = 0

    async def attempt(lk: Link, deadline: float) -> str:
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.01)
        inflight -= 1
        return "ok"

    loop = asyncio.get_running_loop()
    outs = await asyncio.gather(*(ex.run([link("m")], attempt, RES, loop.time() + 30) for _ in range(8)))
    assert all(o.error is None for o in outs)
    assert peak == 2


async def test_an_unconfigured_model_is_not_gated() -> None:
    gates = gates_for("other")
    ex = executor(gates)
    inflight = peak = 0

    async def attempt(lk: Link, deadline: float) -> str:
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.01)
        inflight -= 1
        return "ok"

    loop = asyncio.get_running_loop()
    await asyncio.gather(*(ex.run([link("m")], attempt, RES, loop.time() + 10) for _ in range(8)))
    assert peak == 8


async def test_a_stream_holds_its_slot_until_it_is_settled_and_a_429_lowers_the_limit() -> None:
    gates = gates_for("m", initial=4, max_limit=4)
    ex = executor(gates)
    loop = asyncio.get_running_loop()

    async def ok(lk: Link, deadline: float) -> str:
        return "stream"

    out = await ex.run([link("m")], ok, RES, loop.time() + 10, settle_later=True)
    gate = next(g for g in gates.gates.values() if g is not None)
    assert gate.inflight == 1  # the stream is still being relayed
    out.settlement.success()
    assert gate.inflight == 0

    async def refused(lk: Link, deadline: float) -> str:
        raise UpstreamFailure(FailureKind.UPSTREAM_429, "slow down", status=429)

    out = await ex.run([link("m")], refused, RES, loop.time() + 10)
    assert out.error is not None and gate.limit.limit < 4 and gate.inflight == 0


async def test_a_request_shed_by_the_gate_answers_overloaded_without_an_upstream_call() -> None:
    gates = gates_for("m", initial=1, max_limit=1)
    ex = executor(gates)
    loop = asyncio.get_running_loop()
    release = asyncio.Event()
    calls = 0

    async def slow(lk: Link, deadline: float) -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "ok"

    first = asyncio.ensure_future(ex.run([link("m")], slow, RES, loop.time() + 10))
    await asyncio.sleep(0)
    out = await ex.run([link("m")], slow, RES, loop.time() + 0.2)  # waits, then shed
    assert out.error is not None and out.error.code == "overloaded" and out.attempts == 0
    assert calls == 1
    release.set()
    assert (await first).error is None


async def test_a_shed_request_tries_the_next_model_of_its_chain_before_answering_overloaded() -> None:
    gates = Gates()
    gates.configure({"m": LimitSettings(initial=1, max_limit=1), "n": LimitSettings(initial=1, max_limit=1)})
    ex = executor(gates)
    loop = asyncio.get_running_loop()
    release = asyncio.Event()
    holding = {"m"}

    async def call(lk: Link, deadline: float) -> str:
        if lk.model.id in holding:
            holding.discard(lk.model.id)
            await release.wait()  # holds the model's one slot
        return lk.model.id

    first = asyncio.ensure_future(ex.run([link("m")], call, RES, loop.time() + 10))
    await asyncio.sleep(0)
    ticket = PriorityTicket("o", PRIORITIES["default"], 1.0, gates.clock())  # X-Switchboard-Max-Wait: 0
    out = await ex.run(
        [link("m"), link("n")], call, RES, loop.time() + 10, priority=ticket
    )  # m is full: shed at once, then n
    assert out.error is None and out.result == "n"
    assert out.fallback_reason == "overloaded" and out.attempts == 1  # the shed was no upstream call
    assert out.trail == [("m", "overloaded"), ("n", "ok")]

    holding.add("n")
    held = asyncio.ensure_future(ex.run([link("n")], call, RES, loop.time() + 10, priority=ticket))
    await asyncio.sleep(0)
    out = await ex.run([link("m"), link("n")], call, RES, loop.time() + 10, priority=ticket)  # both full
    assert out.error is not None and out.error.code == "overloaded" and out.attempts == 0
    assert "Retry-After" in out.error.headers
    release.set()
    await asyncio.gather(first, held)
    assert ex.breakers.state(("local", "m")).name == "CLOSED"
