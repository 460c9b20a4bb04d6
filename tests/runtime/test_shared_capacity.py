"""Deployment capacity leased from cluster buckets on a real Redis by the shared-limits Syncer
(docs/deployments.md#capacity), two "processes" in one test: each its own Picker + Syncer,
rounds driven by hand (`sync_once`, what the background task runs every interval).
"""

from __future__ import annotations

import uuid

import pytest

from routing.config import live
from routing.core.buckets import SharedBucket
from routing.core.budget_accounts import Budgets
from routing.core.limiter import Limiter
from routing.core.picking import SHORT, Picker
from routing.runtime.cluster.shared_limits import Syncer, bucket_key
from tests.core.deployments_fakes import multi
from tests.e2e.harness import free_port


@pytest.fixture
async def cluster(redis_url):
    made: list[Syncer] = []
    namespace = f"t{uuid.uuid4().hex[:10]}"  # this test's own cluster buckets

    def process() -> Syncer:
        syncer = Syncer(Budgets(), Limiter(), redis_url, namespace=namespace, picker=Picker(), seed_wait_s=0)
        syncer.connect()
        made.append(syncer)
        return syncer

    yield process
    for syncer in made:
        await syncer.close()


async def serve_once(p: Syncer, target) -> bool:
    """What the executor does for a lone deployment: room, or one round when only the share is short."""
    room = p.picker.room_s(target, 0)
    if room == SHORT:
        await p.sync_once()
        room = p.picker.room_s(target, 0)
    if room != 0:
        return False
    p.picker.take(target, 0)
    return True


async def test_one_deployment_rpm_holds_across_two_processes(cluster):
    p1, p2 = cluster(), cluster()
    (east,) = multi("chat", ("east",), rpm={"east": 10}).deployments
    served = [await serve_once(p, east) for p in (p1, p2) * 10]
    # Per process each would serve 10 (20 in all); shared, the cluster bucket's 10, plus what
    # refills in the test's fraction of a second.
    assert 10 <= served.count(True) <= 11, served
    assert served.count(True) == sum(p.picker.peek(east.key).picked for p in (p1, p2))
    name = bucket_key(("deployment", "east", "chat", "requests"), p1.prefix)
    assert await p1._redis.exists(name)  # one cluster bucket per deployment
    assert isinstance(p1.picker.peek(east.key).rpm, SharedBucket)


async def test_an_idle_share_goes_back_to_the_cluster_bucket(cluster):
    p1, p2 = cluster(), cluster()
    (east,) = multi("chat", ("east",), rpm={"east": 200}).deployments
    assert await serve_once(p1, east)
    bucket = p1.picker.peek(east.key).rpm
    assert bucket.level == 10.0  # the round it waited for leased its one and a share of 5 % of 200 ahead of use
    await p1.sync_once()
    assert bucket.level == 10.0  # topped up to the share
    bucket.used_at -= 3  # unused for longer than IDLE_S
    await p1.sync_once()
    assert bucket.level == 0.0
    assert await serve_once(p2, east)
    theirs = p2.picker.peek(east.key).rpm
    assert theirs.pool + theirs.level >= 200 - 1 - 1  # p1's 10 are back (p2 now holds a share of its own)


async def test_redis_down_each_process_enforces_an_even_share_then_shares_again(cluster):
    p1, p2 = cluster(), cluster()
    (east,) = multi("chat", ("east",), rpm={"east": 10}).deployments
    assert await serve_once(p1, east) and await serve_once(p2, east)
    await p1.sync_once()
    p1.processes = 2  # as the heartbeat counts them

    live_redis = p1._redis
    p1.redis_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    p1.connect()
    await p1.sync_once()
    assert p1.degraded and live.degraded["redis"] is True
    bucket = p1.picker.peek(east.key).rpm
    assert bucket.divisor == 2
    served = [await serve_once(p1, east) for _ in range(8)]
    assert served.count(True) == 5  # an even share (10 ÷ 2) on local state, never refused for want of Redis
    assert p1.picker.room_s(east, 0) > 0  # full, not SHORT: no round can help

    await p1.close()
    p1._redis = live_redis  # Redis is back
    p1._lease = live_redis.register_script(p1._lease.script)
    p1._take = live_redis.register_script(p1._take.script)
    await p1.sync_once()
    assert not p1.degraded and live.degraded["redis"] is False
    assert bucket.divisor == 0  # a share of the cluster bucket again


async def test_the_first_request_of_a_process_waits_for_the_round_of_a_task_not_yet_begun(cluster):
    """daphne sends no lifespan: the first request spawns the syncer and reaches the executor before it runs."""
    import asyncio

    p = cluster()
    (east,) = multi("solo", ("east",), rpm={"east": 10}).deployments
    task = asyncio.get_running_loop().create_task(p.run())  # spawned, not begun
    try:
        assert p.picker.room_s(east, 0) == SHORT
        assert await p.picker.lease(2.0)  # not refused for want of a running syncer
        assert p.picker.room_s(east, 0) == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
