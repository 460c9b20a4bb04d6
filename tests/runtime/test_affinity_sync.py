"""Prompt-cache pins shared over a real Redis (docs/deployments.md#affinity): two processes' syncs in one loop,
and a restarted process that loads the pins still alive."""

from __future__ import annotations

import asyncio

import pytest

from routing.core.affinity import Pins
from routing.core.breaker import BreakerKey
from routing.runtime.cluster.affinity_sync import AffinitySync, decode, encode
from tests.core.fakes import FakeClock
from tests.e2e.harness import RedisServer

EAST, WEST = BreakerKey("east", "chat"), BreakerKey("west", "chat")


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


async def wait_until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def test_a_pin_survives_encode_and_decode_and_garbage_is_refused() -> None:
    assert decode(encode("chat", "s:c1", EAST, 12.5, 300.0, "h:1")) == ("chat", "s:c1", EAST, 12.5, 300.0, "h:1")
    with pytest.raises(ValueError, match="not an affinity pin"):
        decode(b'{"m": "chat"}')


async def test_a_pin_set_in_one_process_is_known_in_another_and_after_a_restart(redis_server) -> None:
    clock = FakeClock()
    one, two = Pins(), Pins()
    sync_one = AffinitySync(one, "one:1", redis_server.url, cluster="t", clock=clock)
    sync_two = AffinitySync(two, "two:2", redis_server.url, cluster="t", clock=clock)
    tasks = [asyncio.ensure_future(s.run()) for s in (sync_one, sync_two)]
    try:
        await wait_until(lambda: sync_one.connected and sync_two.connected)  # subscribed and loaded
        one.put("chat", "s:conv", EAST, 300.0, clock())
        await wait_until(lambda: two.get("chat", "s:conv", clock()) == EAST)
        two.put("chat", "s:conv", WEST, 300.0, clock())  # a re-pin in the other process travels back
        await wait_until(lambda: one.get("chat", "s:conv", clock()) == WEST)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    restarted = Pins()
    sync_three = AffinitySync(restarted, "three:3", redis_server.url, cluster="t", clock=clock)
    client = sync_three._client()
    try:
        assert await sync_three.load(client) == 1
    finally:
        await client.aclose()
    assert restarted.get("chat", "s:conv", clock()) == WEST
    other_cluster = Pins()
    client = AffinitySync(other_cluster, "x:4", redis_server.url, cluster="other")._client()
    try:
        assert await AffinitySync(other_cluster, "x:4", redis_server.url, cluster="other").load(client) == 0
    finally:
        await client.aclose()
