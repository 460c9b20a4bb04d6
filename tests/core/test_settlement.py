"""A stream's breaker charge is decided at its end, not at its commit (docs/resilience.md#r6)."""

from __future__ import annotations

import asyncio

from routing.config.snapshot import Resilience
from routing.core.breaker import BreakerRegistry, State
from routing.core.executor import Executor
from routing.core.retry_budget import RetryBudgets
from routing.core.stream import open_stream
from tests.core.fakes import FakeClock, link

RES = Resilience(breaker_failure_threshold=2, breaker_cooldown_s=30.0)


def executor() -> tuple[Executor, BreakerRegistry, FakeClock]:
    clock = FakeClock()
    breakers = BreakerRegistry(clock=clock)
    breakers.configure(RES)  # as each configuration swap does
    return Executor(breakers, RetryBudgets(clock=clock), clock=clock, sleep=clock.sleep), breakers, clock


async def served(ex: Executor, model_id: str = "s") -> object:
    async def attempt(_link, _deadline):
        return "committed"

    return await ex.run([link(model_id)], attempt, RES, ex.clock() + 60, settle_later=True)


async def test_the_commit_alone_charges_nothing_and_each_outcome_settles_once() -> None:
    ex, breakers, _ = executor()
    key = link("s").breaker_key
    first = await served(ex)
    assert first.result == "committed" and first.settlement is not None
    first.settlement.failure()
    first.settlement.success()  # too late: one settlement per request
    second = await served(ex)
    second.settlement.failure()
    assert breakers.state(key) is State.OPEN  # two broken streams, threshold 2


async def test_clean_ends_and_released_streams_keep_the_breaker_closed() -> None:
    ex, breakers, _ = executor()
    key = link("s").breaker_key
    for end in ("release", "failure", "success", "release", "failure"):
        getattr((await served(ex)).settlement, end)()
    assert breakers.state(key) is State.CLOSED  # never two failures in a row


async def test_without_settle_later_the_commit_is_the_success() -> None:
    ex, _, _ = executor()

    async def attempt(_link, _deadline):
        return "done"

    outcome = await ex.run([link("s")], attempt, RES, ex.clock() + 60)
    assert outcome.result == "done" and outcome.settlement is None


async def _source(*chunks: bytes):
    for chunk in chunks:
        yield chunk


async def ending_of(*chunks: bytes) -> str | None:
    clock = FakeClock()
    stream = await open_stream(_source(*chunks), 30.0, 60.0, clock() + 600, clock=clock)
    async for _ in stream.relay():
        pass
    return stream.ending


FRAME = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'


async def test_how_a_committed_stream_ended() -> None:
    assert await ending_of(FRAME, b"data: [DONE]\n\n") == "ok"
    assert await ending_of(FRAME) == "upstream_stream_error"  # no terminator
    assert await ending_of(FRAME, b'data: {"error": {"message": "boom"}}\n\n') == "upstream_stream_error"


async def test_a_stream_closed_from_outside_ended_for_no_reason_of_the_provider() -> None:
    clock = FakeClock()
    gate = asyncio.Event()

    async def source():
        yield FRAME
        await gate.wait()
        yield b"data: [DONE]\n\n"

    stream = await open_stream(source(), 30.0, 60.0, clock() + 600, clock=clock)
    relay = stream.relay()
    assert await relay.__anext__() == FRAME
    await relay.aclose()  # the client went away
    assert stream.ending is None
