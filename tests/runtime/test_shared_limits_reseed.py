"""A Redis that comes back empty reopens neither rate limits nor budgets (docs/limits.md#reseed), on a real
Redis, three "processes" in one test driven round by round as in tests/runtime/test_shared_limits.py."""

from __future__ import annotations

import math
import time

from routing.core.limiter import Refused
from routing.runtime.shared_limits import Syncer
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
