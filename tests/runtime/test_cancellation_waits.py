"""Background waits end on a cancellation that comes in the same loop pass as their wake-up.

On Python 3.11 `asyncio.wait_for(event.wait(), t)` returns normally when the event is set
and the waiting task is cancelled in the same pass: the cancellation is lost and a loop
that should stop waits again (a teardown that awaits it hangs). These waits use
`asyncio.timeout`, which re-raises it. No Redis is reached: the tasks are cancelled
before they do any I/O.
"""

from __future__ import annotations

import asyncio

from routing.core.breaker import BreakerRegistry
from routing.core.budget_accounts import Budgets
from routing.core.limiter import Limiter
from routing.runtime.cluster import shared_limits
from routing.runtime.cluster.breaker_sync import BreakerSync
from routing.runtime.cluster.shared_limits import Syncer
from tests.core.fakes import FakeClock

NOWHERE = "redis://127.0.0.1:1/0"
PASSES = 5  # loop passes a cancelled task gets to finish: it needs one


async def passes(n: int = PASSES) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def fire_and_cancel(task: asyncio.Task, event: asyncio.Event) -> None:
    """Set the event the task waits on and cancel the task, in one loop pass."""
    await passes()
    assert not task.done()
    event.set()
    task.cancel()
    await passes()
    try:
        assert task.done(), "the cancellation was lost: the task went on waiting"
        assert task.cancelled(), f"the task ended without its cancellation: {task.result()!r}"
    finally:
        if not task.done():  # the bug: stop it for good (a second cancel lands in a plain wait)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class IdleRedis:
    """What the breaker sync's writer calls; nothing to send in these tests."""

    async def ping(self) -> bool:
        return True

    async def publish(self, *args: object) -> int:
        return 0


async def test_the_breaker_sync_writer_stops_when_cancelled_as_it_is_woken() -> None:
    sync = BreakerSync(BreakerRegistry(clock=FakeClock(), wall=FakeClock()), "here:1", NOWHERE)
    sync._wake = asyncio.Event()
    writer = asyncio.ensure_future(sync._write(IdleRedis()))
    await fire_and_cancel(writer, sync._wake)


async def test_the_shared_limits_syncer_stops_when_cancelled_as_it_is_woken(monkeypatch) -> None:
    syncer = Syncer(Budgets(FakeClock()), Limiter(), NOWHERE, clock=FakeClock())

    async def no_round() -> None:
        return None

    monkeypatch.setattr(syncer, "sync_once", no_round)
    task = asyncio.ensure_future(syncer.run())
    await passes()
    assert syncer.running and syncer._wake is not None
    await fire_and_cancel(task, syncer._wake)
    assert not syncer.running


async def test_a_request_waiting_for_the_spend_stops_when_cancelled_as_it_is_loaded() -> None:
    loader = shared_limits.SpendLoader()
    loader.wanted, loader.done = asyncio.Event(), asyncio.Event()
    waiter = asyncio.ensure_future(loader.wait_loaded(30.0))
    await fire_and_cancel(waiter, loader.done)


async def test_the_spend_loader_stops_when_cancelled_as_a_request_asks_for_it() -> None:
    # no account: nothing to read, the loader waits for a request to ask (its own event, made as it starts)
    spend = shared_limits.SpendLoader()
    loader = asyncio.ensure_future(spend.run(Budgets(FakeClock())))
    await passes()
    assert not loader.done()
    await fire_and_cancel(loader, spend.wanted)


async def test_a_request_waiting_for_a_round_stops_when_cancelled_as_the_round_ends(monkeypatch) -> None:
    syncer = Syncer(Budgets(FakeClock()), Limiter(), NOWHERE, clock=FakeClock())
    loop = asyncio.get_running_loop()
    syncer.running, syncer._wake, syncer._round = True, asyncio.Event(), loop.create_future()
    waiter = asyncio.ensure_future(syncer.wait_round(30.0))
    await passes()
    assert not waiter.done()
    syncer._round.set_result(None)
    waiter.cancel()
    await passes()
    assert waiter.cancelled()
