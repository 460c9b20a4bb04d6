"""One pipeline per loop pass (routing.runtime.redis_batch, docs/cache.md#storage), on a real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from routing.runtime.redis_batch import Batcher
from tests.e2e.harness import free_port


async def test_each_command_gets_its_own_reply_or_its_own_error_and_a_caller_that_left_is_skipped(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    batch = Batcher(lambda: client)
    key = f"switchboard:test:batch:{uuid.uuid4().hex}"
    try:
        first = batch.call("SET", key, b"1", "PX", 10_000)
        broken = batch.call("EVAL", "return redis.call('NOPE')", 0)
        gone = batch.call("INCR", key)
        gone.cancel()  # its caller stopped waiting before the pass ended: never sent
        read = batch.call("GET", key)
        assert await first is True
        with pytest.raises(ResponseError):
            await broken
        assert await read == b"1"  # the INCR was not sent
        await batch.drain()
        later = await batch.call("GET", key)  # a later pass: a pipeline of its own
        assert later == b"1"
    finally:
        await client.delete(key)
        await client.aclose()


async def test_an_unreachable_redis_fails_every_command_of_the_batch():
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    batch = Batcher(lambda: client)
    calls = [batch.call("GET", "a"), batch.call("SET", "b", b"1")]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(o) for o in outcomes] == [RedisConnectionError] * 2, outcomes
    await client.aclose()
