"""The response cache's stores and the coalescer (routing.runtime.cache.response_cache, docs/cache.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
import redis.asyncio as aioredis

from routing.core import errors
from routing.runtime.cache.response_cache import (
    BYPASS,
    Coalescer,
    Entry,
    Handover,
    MemoryCache,
    RedisCache,
    decode_entry,
    encode_entry,
)
from tests.e2e.harness import SLACK_S, RedisServer, free_port


@pytest.fixture
async def direct(redis_url):
    """A plain redis-py client on the test's Redis: what another process sees there."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(body: bytes = b'{"ok":true}') -> Entry:
    return Entry(body, "chat-a", "mock", 12, 7)


def test_an_entry_lives_for_its_ttl():
    clock = Clock()
    cache = MemoryCache(clock=clock)
    cache.put("k", entry(), 30)
    clock.now += 29.9
    assert cache.lookup("k") == entry()
    clock.now += 0.1
    assert cache.lookup("k") is None
    assert len(cache) == 0 and cache.bytes == 0


def test_the_lru_is_bounded_by_entries_evicting_the_least_recently_used():
    cache = MemoryCache(max_entries=3, clock=Clock())
    for k in "abc":
        cache.put(k, entry(), 60)
    assert cache.lookup("a") is not None  # a is now the most recent
    cache.put("d", entry(), 60)
    assert [k for k in "abcd" if cache.lookup(k) is not None] == ["a", "c", "d"]


def test_the_lru_is_bounded_by_bytes_and_refuses_an_entry_over_the_entry_bound():
    big = entry(b"x" * 1000)
    cache = MemoryCache(max_bytes=3 * big.size, max_entry_bytes=2000, clock=Clock())
    for k in "abcd":
        assert cache.put(k, big, 60)
    assert len(cache) == 3 and cache.bytes <= 3 * big.size and cache.lookup("a") is None
    assert not cache.put("huge", entry(b"y" * 5000), 60)
    assert cache.lookup("huge") is None


def test_replacing_an_entry_keeps_the_byte_count_exact():
    cache = MemoryCache(clock=Clock())
    cache.put("k", entry(b"x" * 100), 60)
    cache.put("k", entry(b"y" * 10), 60)
    assert cache.bytes == entry(b"y" * 10).size and len(cache) == 1


def test_a_stored_answer_holds_its_length_not_the_json_encoders_buffer():
    """A translated answer is orjson's output, whose bytes keep the encoder's whole buffer (4 KB
    for a short answer, 32 KB for a 3 KB one): the byte bound must count what the cache holds."""
    import tracemalloc

    import orjson

    cache = MemoryCache(clock=Clock())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            cache.put(f"k{n}", entry(orjson.dumps({"id": n, "content": "x" * 3000})), 60)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) == 200
    assert held < 1.5 * cache.bytes, f"{held / 200:.0f} bytes held an answer counted as {cache.bytes / 200:.0f}"


@pytest.mark.parametrize("body", [b'{"small":1}', b'{"data":"' + b"abc" * 2000 + b'"}', os.urandom(4000)])
def test_entries_survive_the_redis_encoding_compressed_only_when_that_pays(body):
    e = entry(body)
    encoded = encode_entry(e)
    assert decode_entry(encoded) == e
    if body.startswith(b'{"data"'):
        assert encoded[:1] == b"z" and len(encoded) < len(body) / 4
    else:
        assert encoded[:1] == b"r"


async def test_waiters_get_the_leaders_answer():
    coalescer = Coalescer()
    flight = coalescer.lead("k")
    waiters = [asyncio.create_task(coalescer.follow(coalescer.flight("k"), 5)) for _ in range(3)]
    await asyncio.sleep(0)
    coalescer.finish("k", flight, entry())
    assert await asyncio.gather(*waiters) == [entry()] * 3
    assert coalescer.flight("k") is None


async def test_a_leaders_error_is_handed_to_the_waiters_and_a_cancelled_leader_hands_over():
    coalescer = Coalescer()
    flight = coalescer.lead("k")
    waiter = asyncio.create_task(coalescer.follow(flight, 5))
    await asyncio.sleep(0)
    failure = errors.upstream_unavailable("mock: 502")
    coalescer.finish("k", flight, failure)
    assert await waiter is failure
    flight = coalescer.lead("k")
    waiter = asyncio.create_task(coalescer.follow(flight, 5))
    await asyncio.sleep(0)
    coalescer.abandon("k", flight)
    with pytest.raises(Handover):
        await waiter
    coalescer.abandon("k", coalescer.lead("k"))  # nobody waiting: no stray exception


async def test_waiting_is_bounded_and_a_waiter_that_gives_up_leaves_the_leader_alone():
    coalescer = Coalescer()
    flight = coalescer.lead("k")
    with pytest.raises(TimeoutError):
        await coalescer.follow(flight, 0.01)
    assert not flight.future.done()
    coalescer.finish("k", flight, entry())


async def test_an_unreachable_redis_is_a_bypass_once_said_and_not_asked_again():
    changes: list[bool] = []
    cache = RedisCache(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2, on_degraded=changes.append)
    try:
        assert await cache.get("k") is BYPASS
        assert changes == [True] and cache.down
        assert await cache.get("k") is BYPASS  # no second attempt, no second notice
        assert not cache.put("k", entry(), 60)
        assert changes == [True]
    finally:
        if cache._probe is not None:
            cache._probe.cancel()


async def test_redis_stores_and_reads_back_and_the_answer_is_readable_while_it_is_written(redis_url, direct):
    cache = RedisCache(redis_url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    try:
        assert await cache.get(key) is None
        big = entry(b'{"v":"' + b"word " * 2000 + b'"}')
        assert cache.put(key, big, 5)
        assert await cache.get(key) == big  # in flight: answered from the write buffer
        await cache.drain()
        other = RedisCache(redis_url, timeout_s=1.0)  # another process's view
        assert await other.get(key) == big
        ttl_ms = await direct.pttl(key)
        assert 0 < ttl_ms <= 5000
        await direct.delete(key)
        await other.aclose()
    finally:
        await cache.aclose()


async def test_a_claim_across_processes_hands_the_stored_answer_to_the_other_and_a_release_frees_it(redis_url, direct):
    a, b = RedisCache(redis_url, timeout_s=1.0), RedisCache(redis_url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    try:
        assert await a.claim(key, 10)
        assert not await b.claim(key, 10)
        waiting = asyncio.create_task(b.wait_other(key, 5))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        a.put(key, entry(), 10)
        assert await waiting == entry()
        await a.drain()
        assert not await direct.exists("switchboard:cache-claim:" + key)  # deleted once stored

        other = key + ":failed"
        assert await a.claim(other, 10)
        waiting = asyncio.create_task(b.wait_other(other, 5))
        a.release(other)  # the call failed: nothing to wait for
        assert await waiting is None
        assert await b.claim(other, 10)  # and the claim is free again
        b.release(other)
        await b.drain()
        await direct.delete(key)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_lookup_takes_the_claim_on_a_miss_in_the_same_round_trip(redis_url, direct):
    a, b = RedisCache(redis_url, timeout_s=1.0), RedisCache(redis_url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    try:
        assert await a.get_or_claim(key, 10) == (None, True)  # a miss: a makes the call
        assert a.holds(key) and not b.holds(key)
        assert await b.get_or_claim(key, 10) == (None, False)  # a miss whose call a is making
        a.put(key, entry(), 10)
        await a.drain()
        assert await b.get_or_claim(key, 10) == (entry(), False)  # a hit takes no claim
        assert not await direct.exists("switchboard:cache-claim:" + key)  # freed with the store
        assert not a.holds(key)
        await direct.delete(key)
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_answer_too_big_to_store_frees_the_claim_so_nobody_waits_for_it(redis_url):
    a, b = RedisCache(redis_url, timeout_s=1.0, max_entry_bytes=1000), RedisCache(redis_url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    try:
        assert await a.claim(key, 30)
        waiting = asyncio.create_task(b.wait_other(key, 10))
        assert not a.put(key, entry(b"x" * 5000), 30)
        assert await asyncio.wait_for(waiting, 5) is None  # told at once, not after the 30 s claim
        assert await b.get(key) is None
    finally:
        await a.drain()
        await a.aclose()
        await b.aclose()


@pytest.fixture
async def paused():
    """A redis-server of the test's own and a client on it. `pause()` stops the server (SIGSTOP): it
    answers nothing, whatever the machine's load, until `resume()`; then it runs what it was sent
    meanwhile, as a busy Redis does once its long command ends. Pausing the session's Redis would
    stall every other user of it."""
    server = RedisServer()
    direct = aioredis.Redis.from_url(server.url)
    yield server, direct
    await direct.aclose()
    server.stop()  # resumes it first


async def eventually(check, within: float) -> bool:
    """Poll `check` (a coroutine function) until it holds or `within` seconds pass."""
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_a_lookup_that_timed_out_after_redis_took_its_claim_frees_that_claim_once_redis_is_back(paused):
    """A busy Redis runs the lookup after the gateway gave up on it (a loaded machine's CI did): the
    claim it took then belongs to no request. Left alone it would make every other process wait for the
    whole claim TTL (the request deadline) before calling; the owner frees it as soon as it sees Redis again."""
    server, direct = paused
    a = RedisCache(server.url, timeout_s=0.1, probe_every_s=3.0)
    b = RedisCache(server.url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    claim = "switchboard:cache-claim:" + key
    try:
        warm = key + ":warm"
        assert await a.get_or_claim(warm, 30) == (None, True)  # connected and the script loaded
        a.release(warm)
        await a.drain()
        server.process.send_signal(signal.SIGSTOP)
        assert await a.get_or_claim(key, 30) == (BYPASS, False)  # gave up after 0.1 s...
        server.process.send_signal(signal.SIGCONT)
        # ...but Redis ran it once going again and took the claim (a frees it at its probe, 3 s on)
        assert await eventually(lambda: direct.exists(claim), within=2.5)
        waited = asyncio.get_running_loop().time()
        assert await b.wait_other(key, 20) is None  # the claim ends without an answer: b calls itself
        assert asyncio.get_running_loop().time() - waited < 3.0 + 2 * SLACK_S  # a's probe, not the claim's 30 s
        assert not a.down
        assert await b.get_or_claim(key, 30) == (None, True)
        b.release(key)
        await b.drain()
    finally:
        for cache in (a, b):
            await cache.aclose()


async def test_a_claim_given_up_while_redis_was_away_is_freed_once_it_is_back(paused):
    server, _ = paused
    a = RedisCache(server.url, timeout_s=0.1, probe_every_s=0.2)
    b = RedisCache(server.url, timeout_s=1.0)
    key = f"switchboard:cache:test:{uuid.uuid4().hex}"
    try:
        assert await a.get_or_claim(key, 30) == (None, True)  # a is making the call
        server.process.send_signal(signal.SIGSTOP)
        assert await a.get(key + ":other") is BYPASS  # another lookup times out: a stops using Redis
        a.release(key)  # the call failed meanwhile: nothing to unclaim with, yet
        server.process.send_signal(signal.SIGCONT)
        assert await asyncio.wait_for(b.wait_other(key, 20), 6) is None  # freed when a saw Redis again
        assert not a.down
    finally:
        for cache in (a, b):
            await cache.aclose()


async def test_the_warm_up_connects_so_a_first_lookup_is_one_round_trip():
    server = RedisServer()  # a fresh server: only the connections of this test
    cache = RedisCache(server.url, timeout_s=1.0)
    direct = aioredis.Redis.from_url(server.url)
    try:
        assert len(await direct.client_list()) == 1  # the asking one
        await cache.warm()
        assert len(await direct.client_list()) == 2  # the cache's, open and kept
        unreachable = RedisCache(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.05)
        await unreachable.warm()  # says nothing, changes nothing: the first lookup finds out
        assert not unreachable.down
    finally:
        await cache.aclose()
        await direct.aclose()
        server.stop()


async def test_the_lookups_and_the_stores_of_a_loop_pass_go_to_redis_in_one_write_each_with_its_answer(
    redis_url, direct
):
    a, b = RedisCache(redis_url, timeout_s=1.0), RedisCache(redis_url, timeout_s=1.0)
    keys = [f"switchboard:cache:test:{uuid.uuid4().hex}" for _ in range(20)]
    try:
        for key in keys[:10]:
            a.put(key, entry(key.encode()), 30)
        await a.drain()
        sent: list[int] = []  # commands per write() on a's connection
        wire = a._batch._wire
        send = wire.send

        def counting_send(data, futures):
            sent.append(len(futures))
            send(data, futures)

        wire.send = counting_send
        found = await asyncio.gather(*(a.get_or_claim(key, 30) for key in keys))
        assert sent == [1, 19]  # the first went at once, on its own; the nineteen behind it in one write
        assert found[:10] == [(entry(key.encode()), False) for key in keys[:10]]
        assert found[10:] == [(None, True)] * 10  # each miss took its own claim
        assert await b.get_or_claim(keys[15], 30) == (None, False)
        for key in keys[10:]:
            a.put(key, entry(b"late"), 30)  # stores and claims' deletions: one pipeline
        await a.drain()
        assert sent == [1, 19, 20]  # ten SETs and ten claims' DELs: at the pass's end, in one write
        assert await b.get_or_claim(keys[15], 30) == (entry(b"late"), False)
        await direct.delete(*keys)
    finally:
        await a.aclose()
        await b.aclose()
