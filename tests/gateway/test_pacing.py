"""Pacing (docs/performance.md#pacing): a burst starts at most `per_tick` requests per loop
pass, in arrival order, and pauses the cyclic GC until it is over."""

from __future__ import annotations

import asyncio
import gc

import pytest

from gateway_project.process import make_gateway
from routing.gateway.pacing import Pacer
from routing.runtime.process import current
from tests import inprocess


@pytest.fixture(autouse=True)
def _gc_enabled_after():
    yield
    gc.enable()


async def _through(pacer: Pacer, i: int, order: list[int]) -> None:
    if not pacer.admit_now():
        await pacer.wait()
    order.append(i)


async def _passes(order: list[int], total: int, limit: int = 200) -> list[int]:
    """How many requests got through after each loop pass, until all did (bounded)."""
    seen: list[int] = []
    for _ in range(limit):
        await asyncio.sleep(0)
        seen.append(len(order))
        if len(order) == total:
            break
    return seen


async def test_a_burst_goes_through_per_tick_per_pass_in_arrival_order():
    pacer = Pacer(4, lambda: 0)
    order: list[int] = []
    tasks = [asyncio.create_task(_through(pacer, i, order)) for i in range(20)]
    seen = await _passes(order, 20)
    await asyncio.gather(*tasks)
    assert order == list(range(20))
    steps = [b - a for a, b in zip([0, *seen], seen, strict=False)]
    assert max(steps) <= 4
    assert len([s for s in steps if s]) >= 5  # the loop came round between the groups


async def test_below_the_rate_nothing_waits():
    pacer = Pacer(4, lambda: 0)
    for _ in range(10):  # one request per pass: never more than per_tick in one pass
        assert pacer.admit_now()
        await asyncio.sleep(0)
    assert pacer.waiting == 0 and gc.isenabled()


async def test_a_cancelled_waiter_leaves_the_queue_and_the_rest_go_on():
    pacer = Pacer(2, lambda: 0)
    order: list[int] = []
    tasks = [asyncio.create_task(_through(pacer, i, order)) for i in range(8)]
    await asyncio.sleep(0)  # 0 and 1 through, the rest waiting
    tasks[5].cancel()
    await _passes(order, 7)
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == [0, 1, 2, 3, 4, 6, 7]
    assert pacer.waiting == 0


async def _until(condition, limit_s: float = 2.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not condition() and loop.time() < end:
        await asyncio.sleep(0.002)
    return condition()


async def test_the_gc_is_paused_during_a_burst_and_resumes_once_it_is_over():
    in_flight = [0]
    pacer = Pacer(2, lambda: in_flight[0])
    order: list[int] = []
    in_flight[0] = 10
    tasks = [asyncio.create_task(_through(pacer, i, order)) for i in range(10)]
    await asyncio.sleep(0)
    assert not gc.isenabled() and pacer.gc_paused
    await asyncio.gather(*tasks)
    await asyncio.sleep(0.02)
    assert not gc.isenabled(), "still 10 requests in flight: the burst is not over"
    in_flight[0] = 0
    assert await _until(gc.isenabled)
    assert not pacer.gc_paused


async def test_sustained_overload_gets_the_gc_back_after_the_bound_and_keeps_it():
    pacer = Pacer(1, lambda: 100, max_gc_pause_s=0.01)  # never calm
    order: list[int] = []
    first = [asyncio.create_task(_through(pacer, i, order)) for i in range(3)]
    await asyncio.sleep(0)
    assert not gc.isenabled()
    assert await _until(gc.isenabled)
    await asyncio.gather(*first)
    second = [asyncio.create_task(_through(pacer, i, order)) for i in range(3, 6)]
    await asyncio.sleep(0)
    assert gc.isenabled(), "paused once for the bound: not again until the load drops"
    await asyncio.gather(*second)
    assert order == list(range(6))


async def test_a_gc_someone_else_disabled_is_left_alone():
    gc.disable()
    pacer = Pacer(1, lambda: 0)
    order: list[int] = []
    tasks = [asyncio.create_task(_through(pacer, i, order)) for i in range(4)]
    await asyncio.gather(*tasks)
    await asyncio.sleep(0.02)
    assert not gc.isenabled() and not pacer.gc_paused


async def test_a_burst_through_the_gateway_is_all_served_and_health_answers_meanwhile(gateway, monkeypatch):
    proc = current()
    monkeypatch.setitem(inprocess.apps, id(proc), (proc, make_gateway(proc, pacer=Pacer(2, lambda: 0))))
    body = {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}
    burst = [asyncio.create_task(gateway.post("/v1/chat/completions", json=body)) for _ in range(30)]
    health = await gateway.get("/health")
    answers = await asyncio.gather(*burst)
    assert health.status_code == 200
    assert [a.status_code for a in answers] == [200] * 30
    assert len({a.headers["x-request-id"] for a in answers}) == 30


def test_a_pacer_left_mid_burst_on_a_closed_loop_works_on_the_next_one():
    pacer = Pacer(2, lambda: 100)
    order: list[int] = []

    async def burst_then_leave() -> None:  # the loop ends with waiters, a tick and the GC pause pending
        for i in range(6):
            asyncio.get_running_loop().create_task(_through(pacer, i, order))
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(burst_then_leave())
    loop.close()
    assert not gc.isenabled()

    async def next_test() -> None:
        assert pacer.admit_now(), "nothing of the closed loop's burst holds this request"
        assert gc.isenabled(), "the closed loop's GC pause is over"
        tasks = [asyncio.create_task(_through(pacer, i, order)) for i in range(10, 16)]
        await asyncio.wait_for(asyncio.gather(*tasks), 2)

    asyncio.run(next_test())
    assert order[-6:] == list(range(10, 16))
