"""The blocking pools' accounting, pinned where the broader tests leave it loose (docs/security.md#blocking):
a pool of N threads takes N calls at once and refuses the next by name, gives every thread back when
its call returns (or fails), gives up waiting after its timeout, shuts down without waiting for a hung
call, and the process's default pools carry their names, sizes and timeouts. In process, with calls
that block on an event the test sets; each test kills mutants the broader tests let live
(docs/testing.md "Mutation testing")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from routing.upstream.blocking import (
    RESOLVE_THREADS,
    RESOLVE_TIMEOUT_S,
    TOKEN_EXCHANGE_THREADS,
    TOKEN_EXCHANGE_TIMEOUT_S,
    BlockingPool,
    BlockingPools,
    PoolBusy,
)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event the blocked calls wait on; set at the end so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


async def settled(pool: BlockingPool) -> None:
    """Until every call's thread is given back (the count is lowered on the worker thread)."""
    for _ in range(200):
        if pool.running == 0:
            return
        await asyncio.sleep(0.01)


async def test_a_pool_takes_as_many_calls_as_threads_and_refuses_the_next_by_name(gate):
    pool = BlockingPool("resolve", 2, 5)
    first, second = pool.submit(gate.wait), pool.submit(gate.wait)
    assert pool.running == 2
    with pytest.raises(PoolBusy) as busy:
        pool.submit(gate.wait)
    assert str(busy.value) == "all 2 threads of the resolve pool are busy with calls that have not returned"
    gate.set()
    assert await first and await second
    await settled(pool)
    assert pool.running == 0
    assert await pool.run(lambda a, b: a + b, 2, 3) == 5  # the threads are free again
    pool.shutdown()


async def test_a_failed_call_gives_its_thread_back():
    pool = BlockingPool("resolve", 1, 5)

    def fails() -> None:
        raise OSError("no such host")

    with pytest.raises(OSError, match="no such host"):
        await pool.run(fails)
    await settled(pool)
    assert pool.running == 0
    assert await pool.run(str, 7) == "7"
    pool.shutdown()


async def test_a_call_past_the_timeout_is_given_up_while_its_thread_runs_on(gate):
    pool = BlockingPool("token-exchange", 1, 0.05)
    releaser = threading.Timer(1.0, gate.set)  # a wait without the timeout would end here, with the call's answer
    releaser.start()
    with pytest.raises(TimeoutError):
        await pool.run(gate.wait)
    assert pool.running == 1
    releaser.cancel()
    gate.set()
    await settled(pool)
    assert pool.running == 0
    pool.shutdown()


async def test_shutdown_does_not_wait_for_a_hung_call_and_refuses_new_ones(gate):
    pool = BlockingPool("resolve", 2, 5)
    hung = pool.submit(gate.wait)
    releaser = threading.Timer(3.0, gate.set)  # a shutdown that waited would only return after this
    releaser.start()
    started = time.monotonic()
    pool.shutdown()
    assert time.monotonic() - started < 1.0
    with pytest.raises(PoolBusy, match="^the resolve pool is shut down$"):
        pool.submit(str, 1)
    assert pool.running == 1  # the refused call took no thread; the hung one still holds its own
    gate.set()
    releaser.cancel()
    assert await hung
    await settled(pool)
    assert pool.running == 0


def test_the_default_pools_carry_their_names_sizes_and_timeouts():
    pools = BlockingPools()
    assert repr(pools.token_exchange) == (
        f"<BlockingPool token-exchange 0/{TOKEN_EXCHANGE_THREADS} timeout={TOKEN_EXCHANGE_TIMEOUT_S:g}s>"
    )
    assert repr(pools.resolve) == f"<BlockingPool resolve 0/{RESOLVE_THREADS} timeout={RESOLVE_TIMEOUT_S:g}s>"
    pools.shutdown()


def test_pools_given_by_the_composition_root_are_the_ones_used():
    exchange, resolve = BlockingPool("token-exchange", 1, 2), BlockingPool("resolve", 3, 1)
    pools = BlockingPools(exchange, resolve)
    assert pools.token_exchange is exchange and pools.resolve is resolve
    pools.shutdown()
    with pytest.raises(PoolBusy):
        exchange.submit(str, 1)
    with pytest.raises(PoolBusy):
        resolve.submit(str, 1)
