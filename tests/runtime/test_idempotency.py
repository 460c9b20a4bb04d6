"""Idempotency-Key: replay, conflict, coalesced duplicates, TTL, LRU, Redis fail-open (docs/api.md#idempotency)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import uuid

import pytest

from routing.runtime.cluster.idempotency import IdempotencyStore, decode_answer, encode_answer

H1 = hashlib.sha256(b'{"messages":[1]}').hexdigest()
H2 = hashlib.sha256(b'{"messages":[2]}').hexdigest()
HEADERS = [(b"content-type", b"application/json"), (b"x-switchboard-model-used", b"chat-a")]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _store(**kwargs) -> IdempotencyStore:
    kwargs.setdefault("ttl_s", 24 * 3600)
    kwargs.setdefault("redis_url", "")
    return IdempotencyStore(**kwargs)


async def test_first_caller_owns_then_same_body_replays_the_stored_answer() -> None:
    store = _store()
    claim = await store.begin("acme", "k1", H1)
    assert claim.owner and not claim.conflict and claim.replay is None
    store.complete(claim, 200, HEADERS, b'{"id":"x"}')

    again = await store.begin("acme", "k1", H1)
    assert not again.owner and not again.conflict
    assert again.replay == (200, HEADERS, b'{"id":"x"}')


async def test_same_key_with_a_different_body_is_a_conflict() -> None:
    store = _store()
    claim = await store.begin("acme", "k1", H1)
    store.complete(claim, 200, HEADERS, b"{}")
    other = await store.begin("acme", "k1", H2)
    assert other.conflict and other.replay is None and not other.owner


async def test_different_body_while_the_first_is_in_flight_is_a_conflict_at_once() -> None:
    store = _store()
    claim = await store.begin("acme", "k1", H1)
    other = await asyncio.wait_for(store.begin("acme", "k1", H2), timeout=5)
    assert other.conflict
    store.release(claim)


async def test_keys_are_per_org() -> None:
    store = _store()
    claim = await store.begin("acme", "k1", H1)
    store.complete(claim, 200, HEADERS, b"{}")
    assert (await store.begin("globex", "k1", H2)).owner


async def test_concurrent_duplicates_wait_and_upstream_is_called_once() -> None:
    store = _store()
    upstream_calls = 0
    gate = asyncio.Event()

    async def request() -> tuple[str, bytes]:
        nonlocal upstream_calls
        claim = await store.begin("acme", "k1", H1)
        if claim.replay is not None:
            return "replayed", claim.replay[2]
        upstream_calls += 1
        await gate.wait()
        store.complete(claim, 200, HEADERS, b"answer")
        return "served", b"answer"

    tasks = [asyncio.create_task(request()) for _ in range(5)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert upstream_calls == 1
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    assert upstream_calls == 1
    assert sorted(r[0] for r in results) == ["replayed"] * 4 + ["served"]
    assert {r[1] for r in results} == {b"answer"}


async def test_a_failed_answer_releases_the_key_and_a_waiting_duplicate_runs_it() -> None:
    store = _store()
    first = await store.begin("acme", "k1", H1)
    waiter = asyncio.create_task(store.begin("acme", "k1", H1))
    await asyncio.sleep(0)
    assert not waiter.done()
    store.complete(first, 502, HEADERS, b'{"error":{}}')
    second = await asyncio.wait_for(waiter, timeout=5)
    assert second.owner  # the retry gets to call the upstream
    store.complete(second, 200, HEADERS, b"ok")
    assert (await store.begin("acme", "k1", H1)).replay == (200, HEADERS, b"ok")


async def test_release_on_cancellation_lets_a_later_retry_run() -> None:
    store = _store()
    claim = await store.begin("acme", "k1", H1)
    store.release(claim)
    store.complete(claim, 200, HEADERS, b"late")  # ignored: the claim was given up
    retry = await store.begin("acme", "k1", H1)
    assert retry.owner


async def test_non_2xx_answers_are_never_replayed() -> None:
    store = _store()
    for status in (400, 429, 500, 503):
        claim = await store.begin("acme", f"k{status}", H1)
        store.complete(claim, status, HEADERS, b"err")
        assert (await store.begin("acme", f"k{status}", H1)).owner


async def test_answers_expire_after_the_ttl() -> None:
    clock = FakeClock()
    store = _store(ttl_s=60, clock=clock)
    claim = await store.begin("acme", "k1", H1)
    store.complete(claim, 200, HEADERS, b"ok")
    clock.now += 59.9
    assert (await store.begin("acme", "k1", H1)).replay is not None
    clock.now += 0.2
    fresh = await store.begin("acme", "k1", H2)  # a new body is fine once the key expired
    assert fresh.owner


async def test_memory_is_bounded_least_recently_used_first() -> None:
    store = _store(max_entries=3)
    for i in range(3):
        claim = await store.begin("acme", f"k{i}", H1)
        store.complete(claim, 200, HEADERS, b"%d" % i)
    assert (await store.begin("acme", "k0", H1)).replay is not None  # k0 is now most recent
    claim = await store.begin("acme", "k3", H1)
    store.complete(claim, 200, HEADERS, b"3")
    assert len(store) == 3
    assert (await store.begin("acme", "k1", H1)).owner  # evicted
    assert (await store.begin("acme", "k0", H1)).replay is not None


def test_redis_value_round_trips_binary_bodies() -> None:
    from routing.runtime.cluster.idempotency import Answer

    answer = Answer(H1, 201, tuple(HEADERS), b'{"a":1}\n\x00\xff', 123.5)
    assert decode_answer(encode_answer(answer)) == answer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_redis_down_fails_open_to_memory_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    store = _store(redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    with caplog.at_level(logging.WARNING, logger="switchboard.idempotency"):
        claim = await asyncio.wait_for(store.begin("acme", "k1", H1), timeout=5)
        assert claim.owner
        store.complete(claim, 200, HEADERS, b"ok")
        await asyncio.wait_for(store.drain(), timeout=5)
        replay = await asyncio.wait_for(store.begin("acme", "k1", H1), timeout=5)
        other = await asyncio.wait_for(store.begin("acme", "k2", H1), timeout=5)
    assert replay.replay == (200, HEADERS, b"ok")
    assert other.owner
    warnings = [r for r in caplog.records if r.name == "switchboard.idempotency" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "REDIS_URL" in warnings[0].getMessage()


async def test_answers_are_shared_through_redis_between_processes(redis_url: str) -> None:
    import redis.asyncio as aioredis

    first, second = _store(redis_url=redis_url), _store(redis_url=redis_url)
    key = f"k-{uuid.uuid4().hex}"
    claim = await first.begin("acme", key, H1)
    first.complete(claim, 200, HEADERS, b"from-first")
    await first.drain()
    direct = aioredis.Redis.from_url(redis_url)
    try:
        stored = first._redis_key(("acme", key))
        assert key not in stored  # client keys are hashed, not stored verbatim
        assert 24 * 3600 - 5 <= await direct.ttl(stored) <= 24 * 3600
        second_claim = await second.begin("acme", key, H1)  # not in second's memory: read from Redis
        assert second_claim.replay == (200, HEADERS, b"from-first")
        assert (await second.begin("acme", key, H2)).conflict
        again = await second.begin("acme", key + "-other", H1)
        assert again.owner  # a key nobody answered: this caller runs it
        second.release(again)
        first.complete(await first.begin("acme", key, H1), 200, HEADERS, b"late")  # a replay: nothing stored
        await first.drain()
        assert decode_answer(await direct.get(stored)).body == b"from-first"  # SET NX: the first answer stays
        await direct.delete(stored)
    finally:
        await direct.aclose()
