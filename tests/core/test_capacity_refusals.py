"""Capacity refusals under an adaptive concurrency limit: a signal to the limit, never a breaker failure
(docs/resilience.md#capacity)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from routing.config.snapshot import Resilience
from routing.core.admission_queue import Gates
from routing.core.breaker import BreakerRegistry, State
from routing.core.concurrency import LimitSettings
from routing.core.executor import Executor, Link
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.retry_budget import RetryBudgets
from tests.core.fakes import link

RES = Resilience(max_retries=0)
OVERLOADED = orjson.dumps({"error": {"type": "overloaded_error", "message": "Overloaded"}})


def too_many() -> UpstreamFailure:
    return UpstreamFailure(FailureKind.UPSTREAM_429, "upstream answered 429 Too Many Requests", 429)


def setup(limited: bool, initial: int = 5) -> tuple[Executor, BreakerRegistry, Gates]:
    gates = Gates()
    if limited:
        gates.configure({"m": LimitSettings(initial=initial, min_limit=1, max_limit=40)})
    breakers = BreakerRegistry()
    return Executor(breakers, RetryBudgets(), gates=gates), breakers, gates


class Upstream:
    """Answers 429 to its first `refusals` calls, then 200."""

    def __init__(self, refusals: int, failure: Any = too_many) -> None:
        self.refusals = refusals
        self.failure = failure
        self.calls = 0

    async def __call__(self, lk: Link, deadline: float) -> str:
        self.calls += 1
        if self.calls <= self.refusals:
            raise self.failure()
        return "ok"


async def test_thirteen_upstream_429s_under_an_adaptive_limit_lower_it_and_never_open_the_breaker() -> None:
    ex, breakers, gates = setup(limited=True)
    upstream = Upstream(13)
    loop = asyncio.get_running_loop()
    lk = link("m")
    outs = [await ex.run([lk], upstream, RES, loop.time() + 10) for _ in range(6)]
    assert upstream.calls >= 14
    assert breakers.state(lk.breaker_key) is State.CLOSED
    assert all(v.consecutive_failures == 0 for v in breakers.views())  # not one failure charged
    gate = gates.gates[lk.breaker_key]
    assert gate is not None and gate.limit.limit < 5, gate.limit.limit  # each 429 took the limit down
    # max_retries 0, yet the first requests went back to the queue instead of answering the 429
    assert outs[-1].error is None and outs[-1].result == "ok"
    assert outs[3].error is None  # the 13th refusal was absorbed by its request's requeue


async def test_without_an_adaptive_limit_the_same_429s_open_the_breaker_as_before() -> None:
    ex, breakers, _ = setup(limited=False)
    upstream = Upstream(13)
    loop = asyncio.get_running_loop()
    lk = link("m")
    outs = [await ex.run([lk], upstream, RES, loop.time() + 10) for _ in range(6)]
    assert [o.error.code for o in outs[:5]] == ["upstream_rate_limited"] * 5  # one call each: max_retries 0
    assert breakers.state(lk.breaker_key) is State.OPEN  # R5: five failed requests
    assert outs[5].error.code == "circuit_open" and upstream.calls == 5


async def test_a_burst_past_a_hard_capacity_is_absorbed_by_the_queue_with_max_retries_zero() -> None:
    """The audit's case: limits that together overshoot the upstream's capacity at start. Every request is
    served (none sees the 429), the limit comes down to the capacity, the breaker stays closed."""
    ex, breakers, gates = setup(limited=True, initial=12)
    capacity, inflight = 4, 0
    calls = refused = 0

    async def upstream(lk: Link, deadline: float) -> str:
        nonlocal inflight, calls, refused
        calls += 1
        if inflight >= capacity:
            refused += 1
            raise too_many()
        inflight += 1
        try:
            await asyncio.sleep(0.005)
        finally:
            inflight -= 1
        return "ok"

    loop = asyncio.get_running_loop()
    lk = link("m")
    outs = await asyncio.gather(*(ex.run([lk], upstream, RES, loop.time() + 10) for _ in range(40)))
    assert [o.error for o in outs] == [None] * 40
    assert refused >= 8 and breakers.state(lk.breaker_key) is State.CLOSED
    gate = gates.gates[lk.breaker_key]
    assert gate is not None and gate.limit.limit <= capacity + 1


async def test_a_529_or_an_overloaded_503_is_capacity_but_a_plain_503_still_opens_the_breaker() -> None:
    loop = asyncio.get_running_loop()
    lk = link("m")
    for failure in (
        lambda: UpstreamFailure(FailureKind.UPSTREAM_5XX, "upstream answered HTTP 529", 529),
        lambda: UpstreamFailure(FailureKind.UPSTREAM_5XX, "upstream answered HTTP 503", 503, None, OVERLOADED),
    ):
        ex, breakers, _ = setup(limited=True)
        upstream = Upstream(13, failure)
        for _ in range(6):
            await ex.run([lk], upstream, RES, loop.time() + 10)
        assert breakers.state(lk.breaker_key) is State.CLOSED

    ex, breakers, _ = setup(limited=True)
    upstream = Upstream(13, lambda: UpstreamFailure(FailureKind.UPSTREAM_5XX, "upstream answered HTTP 503", 503))
    outs = [await ex.run([lk], upstream, RES, loop.time() + 10) for _ in range(6)]
    assert breakers.state(lk.breaker_key) is State.OPEN  # unhealthy, not busy: R5 as before
    assert outs[5].error.code == "circuit_open"


async def test_capacity_requeues_are_bounded_and_end_as_the_429_without_charging_the_breaker() -> None:
    ex, breakers, _ = setup(limited=True)
    upstream = Upstream(10_000)
    loop = asyncio.get_running_loop()
    lk = link("m")
    out = await ex.run([lk], upstream, RES, loop.time() + 10)
    assert out.error is not None and out.error.code == "upstream_rate_limited"
    assert upstream.calls == 4  # the call and 3 requeues, none of them one of max_retries (0)
    assert breakers.state(lk.breaker_key) is State.CLOSED


async def test_a_capacity_refusal_moves_to_another_deployment_with_room_instead_of_waiting_for_this_one() -> None:
    from tests.core.deployments_fakes import multi

    gates = Gates()
    gates.configure({"m": LimitSettings(initial=5, min_limit=1, max_limit=40)})
    breakers = BreakerRegistry()
    ex = Executor(breakers, RetryBudgets(), gates=gates, rand=lambda: 0.0)  # picks the first deployment first
    lk = multi("m", ("busy", "free"))
    called: list[str] = []

    async def upstream(link_: Link, deadline: float) -> str:
        called.append(link_.breaker_key.provider)
        if link_.breaker_key.provider == "busy":
            raise too_many()
        return "ok"

    loop = asyncio.get_running_loop()
    out = await ex.run([lk], upstream, RES, loop.time() + 10)
    assert out.error is None and called[-1] == "free"
    assert called.count("busy") == 1  # not requeued on the busy one while the other had room
    assert all(breakers.state(t.key) is State.CLOSED for t in lk.deployments)
