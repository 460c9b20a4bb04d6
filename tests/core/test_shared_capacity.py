"""Deployment capacity counted in shares of cluster buckets (docs/deployments.md#capacity), pure.

The lessor here is a fake cluster in memory with the Syncer's contract
(routing.runtime.cluster.shared_limits): a round tops each share up to one request from the cluster
bucket, never past its level, and tells the bucket the cluster's level. The real
Syncer on a real Redis is tests/runtime/test_shared_capacity.py; real processes are
tests/e2e/test_shared_capacity_e2e.py.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

from routing.config.snapshot import Resilience
from routing.core.breaker import BreakerRegistry
from routing.core.buckets import LEASE_WAIT_S, Bucket, SharedBucket
from routing.core.executor import Executor, Link
from routing.core.picking import SHORT, Picker
from routing.core.retry_budget import RetryBudgets
from tests.core.deployments_fakes import multi
from tests.core.fakes import FakeClock

RES = Resilience()


class FakeCluster:
    """Cluster buckets by name (no refill: the tests' minute never passes) and the lessor of each process."""

    def __init__(self, share: float = 1.0) -> None:
        self.levels: dict[tuple[str, ...], float] = {}
        self.share = share

    def lessor(self, picker: Picker) -> FakeLessor:
        lessor = FakeLessor(self, picker)
        picker.share(lessor)
        return lessor


class FakeLessor:
    def __init__(self, cluster: FakeCluster, picker: Picker) -> None:
        self.cluster = cluster
        self.picker = picker
        self.woken = 0
        self.waits: list[float] = []

    def starved(self) -> None:
        self.woken += 1

    async def wait_round(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        self.round()
        return True

    def round(self) -> None:
        """What one Syncer round does for each bucket: lease up to the share, never past the cluster level."""
        for name, bucket in self.picker.buckets():
            assert isinstance(bucket, SharedBucket)
            level = self.cluster.levels.setdefault(name, bucket.capacity)
            target = max(self.cluster.share, bucket.need)
            grant = float(math.floor(min(max(0.0, target - bucket.level), level)))
            self.cluster.levels[name] = level - grant
            bucket.level += grant
            bucket.pool = level - grant
            bucket.need = 0.0


class Process:
    """One serving process: its own picker and executor over simulated time."""

    def __init__(self, clock: FakeClock, cluster: FakeCluster | None = None, seed: int = 1) -> None:
        self.clock = clock
        self.picker = Picker(clock=clock)
        self.lessor = cluster.lessor(self.picker) if cluster is not None else None
        self.ex = Executor(
            BreakerRegistry(clock=clock),
            RetryBudgets(clock=clock),
            clock=clock,
            sleep=clock.sleep,
            rand=random.Random(seed).random,
            picker=self.picker,
        )
        self.calls: list[str] = []

    async def attempt(self, lk: Link, deadline: float) -> Any:
        self.calls.append(lk.model.provider.name)
        return lk.model.provider.name

    async def run(self, lk: Link, tokens: int = 0):
        return await self.ex.run([lk], self.attempt, RES, self.clock() + 600.0, tokens=tokens)


def test_without_a_lessor_capacity_stays_a_local_full_bucket_per_process() -> None:
    (east,) = multi("chat", ("east",), rpm={"east": 5}).deployments
    bal = Picker(clock=FakeClock())
    assert bal.room_s(east, 0) == 0
    bucket = bal.peek(east.key).rpm
    assert type(bucket) is Bucket and bucket.level == 5.0


def test_a_share_starts_empty_wakes_the_lessor_and_serves_once_leased() -> None:
    clock = FakeClock()
    (east,) = multi("chat", ("east",), rpm={"east": 10}).deployments
    bal = Picker(clock=clock)
    lessor = FakeCluster().lessor(bal)
    assert bal.room_s(east, 0) == SHORT  # no share yet, but the cluster bucket has room
    assert lessor.woken == 1
    assert bal.peek(east.key).rpm.need == 1.0  # the hint for the next round
    lessor.round()
    assert bal.room_s(east, 0) == 0
    bal.take(east, 0)
    assert bal.room_s(east, 0) == SHORT  # the one-request share is used up
    assert bal.buckets() == [(("deployment", "east", "chat", "requests"), bal.peek(east.key).rpm)]


def test_a_cluster_bucket_seen_empty_is_full_without_waking_anyone() -> None:
    clock = FakeClock()
    (east,) = multi("chat", ("east",), rpm={"east": 6}).deployments
    bal = Picker(clock=clock)
    lessor = FakeCluster().lessor(bal)
    bal.room_s(east, 0)
    bucket = bal.peek(east.key).rpm
    bucket.pool = 0.0  # the last round saw the cluster bucket empty
    woken = lessor.woken
    assert bal.room_s(east, 0) == 10.0  # one request refills in 60 / 6 s
    assert lessor.woken == woken


def test_tpm_shares_count_the_token_estimate() -> None:
    clock = FakeClock()
    (east,) = multi("chat", ("east",), tpm={"east": 1000}).deployments
    bal = Picker(clock=clock)
    FakeCluster(share=50).lessor(bal)
    assert bal.room_s(east, 300) == SHORT
    bucket = bal.peek(east.key).tpm
    assert bucket.need == 300.0  # the round leases at least this request's tokens
    bal.lessor.round()
    assert bal.room_s(east, 300) == 0
    bal.take(east, 300)
    assert bucket.level == 0.0


def test_redis_down_a_share_is_an_even_local_share_that_refills() -> None:
    clock = FakeClock()
    (east,) = multi("chat", ("east",), rpm={"east": 10}).deployments
    bal = Picker(clock=clock)
    FakeCluster().lessor(bal)
    bal.room_s(east, 0)
    bucket = bal.peek(east.key).rpm
    bucket.divisor, bucket.level = 2, 5.0  # what the Syncer's fail-open does with 2 processes seen
    for _ in range(5):
        assert bal.room_s(east, 0) == 0
        bal.take(east, 0)
    assert bal.room_s(east, 0) > 0  # full, not SHORT: no round can help while Redis is down
    clock.advance(12.0)  # rate ÷ 2: one request per 12 s
    assert bal.room_s(east, 0) == 0


async def test_a_short_deployment_is_passed_over_while_another_can_serve() -> None:
    clock = FakeClock()
    p = Process(clock, FakeCluster())
    lk = multi("chat", ("east", "west"), weights=(100, 1), rpm={"east": 10})
    out = await p.run(lk)
    assert out.result == "west"  # east's share is still empty: no wait, the other one serves
    assert p.lessor.woken >= 1 and p.lessor.waits == []
    p.lessor.round()  # the woken round leases east a share
    assert (await p.run(lk)).result == "east"


async def test_a_lone_short_deployment_waits_for_one_lease_round_then_serves() -> None:
    clock = FakeClock()
    p = Process(clock, FakeCluster())
    lk = multi("solo", ("east",), rpm={"east": 2})
    assert (await p.run(lk)).result == "east"
    assert len(p.lessor.waits) == 1 and 0 < p.lessor.waits[0] <= LEASE_WAIT_S
    assert (await p.run(lk)).result == "east"  # its round leased the cluster's last request
    out = await p.run(lk)  # known empty since that round: refused at once, no wait
    assert out.error is not None and out.error.code == "upstream_rate_limited" and out.error.status == 429
    assert int(out.error.headers["Retry-After"]) == 30  # the cluster bucket frees one in 60 / 2 s
    assert len(p.lessor.waits) == 2
    p.picker.peek(lk.deployments[0].key).rpm.pool = 2.0  # a stale view: another process took them since
    out = await p.run(lk)  # one round, which grants nothing, then refused
    assert out.error is not None and out.error.code == "upstream_rate_limited"
    assert int(out.error.headers["Retry-After"]) == 30
    assert len(p.lessor.waits) == 3
    assert p.calls == ["east", "east"]  # nothing beyond the capacity was sent upstream


async def test_two_processes_share_one_deployment_capacity() -> None:
    lk = multi("chat", ("east", "west"), weights=(100, 1), rpm={"east": 10})

    async def serve(cluster: FakeCluster | None) -> Counter[str]:
        clock = FakeClock()
        a, b = Process(clock, cluster, seed=1), Process(clock, cluster, seed=2)
        served: Counter[str] = Counter()
        for _ in range(20):
            for p in (a, b):
                out = await p.run(lk)
                assert out.error is None
                served[out.result] += 1
                if p.lessor is not None:
                    p.lessor.round()  # the round a starved share wakes, between two requests
                clock.advance(0.01)
        return served

    assert await serve(None) == {"east": 20, "west": 20}  # per process: 2 × the capacity
    shared = await serve(FakeCluster())
    assert shared["east"] == 10 and shared["west"] == 30  # the cluster's 10 (no refill in 0.4 s of fake time)


async def test_no_round_within_the_wait_refuses_with_a_short_retry_after() -> None:
    clock = FakeClock()
    p = Process(clock, FakeCluster())

    async def no_round(timeout_s: float) -> bool:
        p.lessor.waits.append(timeout_s)
        return False  # the lessor did not finish a round in time (a slow Redis)

    p.lessor.wait_round = no_round
    out = await p.run(multi("solo", ("east",), rpm={"east": 60}))
    assert out.error is not None and out.error.code == "upstream_rate_limited"
    assert out.error.headers["Retry-After"] == "1"
    assert p.calls == [] and len(p.lessor.waits) == 1


async def test_a_short_deployment_waits_for_rounds_while_the_cluster_bucket_has_room() -> None:
    """Its first round's grant went to other waiters of the process (the cluster bucket still has room):
    it asks again in the next round instead of a 429 (docs/limits.md#shared)."""
    clock = FakeClock()
    p = Process(clock, FakeCluster())
    lk = multi("solo", ("east",), rpm={"east": 60})
    rounds = 0

    async def stolen_then_granted(timeout_s: float) -> bool:
        nonlocal rounds
        rounds += 1
        if rounds > 1:
            p.lessor.round()
        return True  # the first round ended, but what it leased was taken by others

    p.lessor.wait_round = stolen_then_granted
    out = await p.run(lk)
    assert out.error is None and out.result == "east"
    assert rounds == 2 and p.calls == ["east"]
    assert p.picker.peek(lk.deployments[0].key).rpm.need == 0.0  # the second round took its need


def test_a_shared_bucket_counts_its_share_plus_the_cluster_s_level_refilled_since_the_last_round() -> None:
    """Found by mutation testing (SharedBucket.cluster_level / remaining / wait / reset_s): exact values."""
    from routing.core.buckets import SharedBucket

    b = SharedBucket(60, 0.0)  # 60 a minute: 1 a second
    b.level, b.pool, b.pool_at = 5.0, 10.0, 0.0  # a share of 5 leased; the cluster bucket had 10 at the round
    b.refill(4.0, 60)  # 4 s later: the share is not refilled here, the cluster bucket is (as far as we know)
    assert b.level == 5.0 and b.cluster_level() == 14.0 and b.remaining() == 19.0
    assert b.wait(30.0) == 11.0 and b.wait(10.0) == 0.0
    assert b.wait(1000.0) == b.reset_s() == 41.0  # never more than the capacity to wait for
    b.pool, b.pool_at = 20.0, 3.5
    assert b.cluster_level() == 20.5  # half a second since the round: half a token
    b.pool, b.pool_at = 59.0, 4.0
    b.refill(5.5, 60)
    assert b.cluster_level() == 60.0  # refilled (60.5), but never past its capacity
    b.pool, b.pool_at = -5.0, 10.0  # overdrawn by other processes
    assert b.cluster_level() == 0.0 and b.remaining() == 5.0
    b.divisor = 3  # Redis unreachable: only this process's share counts
    b.pool = 50.0
    assert b.remaining() == 5.0
