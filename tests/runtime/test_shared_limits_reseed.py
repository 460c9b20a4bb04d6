"""A Redis that comes back empty reopens neither rate limits nor budgets (docs/limits.md#reseed), on a real
Redis, three "processes" in one test driven round by round as in tests/runtime/test_shared_limits.py."""

from __future__ import annotations

import math
import time
import uuid

import pytest

from routing.core.limiter import Refused
from routing.runtime.cluster.shared_limits import Syncer, account_key
from tests.runtime.test_shared_limits import cluster, org_name  # noqa: F401 - the fixture

RPM = 60
SHARE = max(1, math.ceil(RPM * 0.05))  # a share of a cluster bucket (LEASE_FRACTION)


async def burst(processes: list[Syncer], org: str, n: int) -> int:
    """`n` requests round-robin over the processes, each as the request path admits it: from the share,
    else after the round its short share wakes. How many were admitted."""
    admitted = 0
    for i in range(n):
        p = processes[i % len(processes)]
        for attempt in range(2):
            try:
                p.limiter.admit(org, (RPM, None), "bot", None, lambda: 0)
            except Refused as refused:
                if attempt == 0 and refused.short:
                    await p.sync_once()
                    continue
                break
            admitted += 1
            break
    return admitted


async def test_rpm_60_burst_60_then_redis_flushed_then_burst_60_admits_at_most_one_bucket(cluster):  # noqa: F811
    _, process = cluster
    processes = [process(), process(), process()]
    org = org_name()
    began = time.monotonic()
    first = await burst(processes, org, RPM)
    assert first >= RPM - len(processes)  # a burst that fits a fresh bucket (within a share)
    await processes[0]._redis.flushall()  # Redis restarted empty
    second = await burst(processes, org, RPM)
    refilled = (time.monotonic() - began) * RPM / 60
    # before: the bucket came back full and the second burst got about 60 more (114 in 3 s in the audit)
    assert first + second <= RPM + len(processes) * SHARE + math.ceil(refilled), (first, second, refilled)
    print(f"first burst {first}, after FLUSHALL {second}, refilled {refilled:.2f}")


async def test_spend_during_an_outage_is_counted_once_when_redis_returns_empty(redis_url, monkeypatch):
    """The audit's false 402s: a key that spent while Redis was down had its counter rebuilt from the records
    (which hold that spend) plus the same spend again. Now its next requests are admitted exactly while the
    records show budget left, and refused once it is spent."""
    import redis.asyncio as aioredis

    from routing.core.budget_accounts import Budgets
    from routing.core.limiter import Limiter
    from routing.runtime.cluster import shared_spend
    from tests.e2e.harness import free_port
    from tests.runtime.test_shared_limits import Clock, admit_budget

    clock, namespace = Clock(), uuid.uuid4().hex[:12]
    org, budget, cost = org_name(), (0.01, "total"), 0.0005  # the audit's $0.01
    key = ("agent", org, "bot")
    records = {"usd": 0.0}  # the usage records: every settled request is written (the database stays up)
    monkeypatch.setattr(shared_spend, "query_spend", lambda starts, until=None: {(key, 0.0): records["usd"]})

    def written() -> bool:  # the usage writer's flush: every record is in the database already
        return True

    def process() -> Syncer:
        s = Syncer(Budgets(clock), Limiter(), redis_url, clock=clock, namespace=namespace, seed_wait_s=0, flush=written)
        s.connect()
        return s

    async def spend(p: Syncer, hold=None) -> None:
        hold = hold or await admit_budget(p, org, budget, cost)
        hold.settle(cost)
        records["usd"] += cost

    p1, p2 = process(), process()
    direct = aioredis.Redis.from_url(redis_url)
    try:
        for p in (p1, p2, p1, p2):
            await spend(p)  # $0.002 with Redis up
        for p in (p1, p2):
            await p.sync_once()
            p.processes = 2
            p.redis_url = f"redis://127.0.0.1:{free_port()}/0"  # Redis down
            p.connect()
            await p.sync_once()
            assert p.degraded
        for p in (p1, p2, p1, p2, p1, p2):
            await spend(p, p.budgets.admit(org, None, "bot", budget, cost))  # $0.003 on the outage shares
        await direct.flushall()  # Redis back, empty
        await direct.set(p1.prefix + "seeding", "another process", ex=15)  # it rebuilds; these two notice first
        for p in (p1, p2):
            p.redis_url = redis_url
            p.connect()
            await p.sync_once()
        await direct.delete(p1.prefix + "seeding")
        await p1.sync_once()  # rebuilds from the records, adds what it holds
        await p2.sync_once()  # adopts, adds what it holds
        clock.now += 3  # idle leases go back to the counter
        await p1.sync_once()
        await p2.sync_once()
        counter = int(await direct.get(account_key(p1.budgets.find(key), p1.prefix))) / 1e6
        assert counter == pytest.approx(records["usd"])  # the records, leases given back: never more
        left = round((budget[0] - records["usd"]) / cost)
        admitted = 0
        while (hold := await admit_budget(p1, org, budget, cost)) is not None:
            await spend(p1, hold)
            admitted += 1
        assert admitted == left == 10  # 0 false 402s (before: 4, the outage's $0.003 counted twice)
        assert records["usd"] == pytest.approx(budget[0])
    finally:
        await direct.aclose()
        await p1.close()
        await p2.close()


async def test_a_rebuild_waits_for_a_starved_writer_instead_of_a_fixed_time(redis_url, monkeypatch):
    """A rebuild read the records after a fixed wait (a write interval + 0.3 s): a process whose writer was
    slower (starved of CPU, waiting for SQLite's lock) had spend that was in the lost counter and not yet in
    the records, counted nowhere, and admitted again. Now the rebuild reads once every process has reported
    its records written: here the second process's writer is held until the rebuild reads (or 1 s passes),
    the fixed wait is 0.05 s, and the syncers' clock is frozen, so only a report can end the wait."""
    import asyncio
    import threading

    import redis.asyncio as aioredis

    from routing.core.budget_accounts import Budgets
    from routing.core.limiter import Limiter
    from routing.runtime.cluster import shared_spend
    from tests.runtime.test_shared_limits import Clock, admit_budget

    clock, namespace = Clock(), uuid.uuid4().hex[:12]
    org, budget, cost = org_name(), (0.01, "total"), 0.0005
    key = ("agent", org, "bot")
    records = {"usd": 0.0}  # written to the database
    queued = {"usd": 0.0}  # the slow process's records its writer has not written yet
    writer = threading.Event()  # the slow writer may run

    def read(starts, until=None):
        seen = records["usd"]
        writer.set()  # the read is done: a writer still held runs now (only too late for it)
        return {(key, 0.0): seen}

    monkeypatch.setattr(shared_spend, "query_spend", read)

    def fast() -> bool:
        return True

    def slow() -> bool:
        writer.wait(1.0)
        records["usd"] += queued["usd"]
        queued["usd"] = 0.0
        return True

    def process(flush) -> Syncer:
        s = Syncer(
            Budgets(clock), Limiter(), redis_url, clock=clock, namespace=namespace, seed_wait_s=0.05, flush=flush
        )
        s.connect()
        return s

    a, b = process(fast), process(slow)
    direct = aioredis.Redis.from_url(redis_url)
    try:
        for p, n in ((a, 4), (b, 6)):  # $0.002 written by A, $0.003 settled by B and still in its writer's queue
            for _ in range(n):
                (await admit_budget(p, org, budget, cost)).settle(cost)
                (records if p is a else queued)["usd"] += cost
        for p in (a, b, a, b):
            await p.sync_once()  # both counted; every spend told to the counter
        writer.clear()  # the first rebuild (the cluster's start) read the records: B's writer is held again
        await direct.flushall()  # Redis restarted empty
        await asyncio.gather(a.sync_once(), b.sync_once())  # A rebuilds (driven by hand), B's writer is slow
        for p in (a, b, a, b):
            await p.sync_once()  # both adopt the rebuilt counters
        clock.now += 3  # idle leases go back
        for p in (a, b):
            await p.sync_once()
        assert records["usd"] == pytest.approx(0.005)
        counter = int(await direct.get(account_key(a.budgets.find(key), a.prefix))) / 1e6
        assert counter == pytest.approx(0.005, abs=1e-9)  # the records, B's included; the leases given back
        admitted = 0
        while (hold := await admit_budget(a, org, budget, cost)) is not None:
            hold.settle(cost)
            records["usd"] += cost
            admitted += 1
        # before: B's $0.003 was in neither the records read nor what B added: 16 more admitted ($0.013)
        assert records["usd"] <= budget[0] + 1e-9, (admitted, records["usd"])
        assert admitted == 10
    finally:
        writer.set()
        await direct.aclose()
        await a.close()
        await b.close()


async def test_a_rebuild_waits_for_a_silent_process_only_up_to_its_bound_on_the_syncers_clock(cluster):  # noqa: F811
    """A process that died with Redis never reports its records written: the rebuild then waits its bound
    (measured on the syncer's clock, injected here) and goes on, rather than leasing nothing until then."""
    import asyncio

    clock, process = cluster
    rebuilder, silent = process(seed_wait_s=2.0), process()
    await silent.hello()  # alive, never reports
    await rebuilder.hello()
    await rebuilder._report_written()
    task = asyncio.get_running_loop().create_task(rebuilder._reseed())
    await asyncio.sleep(0.2)  # a frozen clock: however long this takes, the bound has not passed
    assert not task.done() and await rebuilder._redis.get(rebuilder.prefix + "epoch") is None
    await silent._report_written()  # it reports: the wait ends at once
    await asyncio.wait_for(task, 5.0)
    assert await rebuilder._redis.get(rebuilder.prefix + "epoch") is not None
    await rebuilder._redis.delete(rebuilder.prefix + "epoch")  # emptied again; the silent one stays silent
    task = asyncio.get_running_loop().create_task(rebuilder._reseed())
    await asyncio.sleep(0.2)
    assert not task.done()
    clock.now += 2.0  # the bound passed
    await asyncio.wait_for(task, 5.0)
    assert await rebuilder._redis.get(rebuilder.prefix + "epoch") is not None
