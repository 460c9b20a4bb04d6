"""The request path's side of shared limits: what a request does when its share is short.

The request path never calls Redis. A request the local share cannot cover wakes its own process's
syncer, handed in by the gateway (`call.process.syncer`, never the installed process's: two processes in
one interpreter never wake each other's) (`Process.syncer`, routing.runtime.cluster.shared_leases) and waits, bounded, for the rounds
that lease what it needs; a request of a new budget account waits, bounded, for the spend loader's
next pass (`Process.spend`, routing.runtime.cluster.shared_spend). Without a syncer (no REDIS_URL)
limits are per process and nothing here waits.
"""

from __future__ import annotations

import asyncio
import time

from routing.core.budget_accounts import Account
from routing.runtime.cluster.shared_leases import Syncer
from routing.runtime.cluster.shared_spend import SpendLoader
from routing.runtime.process import installed


def install(syncer: Syncer | None) -> None:
    """Make `syncer` the installed process's (None: budgets are per process). Start-up and tests only."""
    process = installed()
    if process is not None:
        process.syncer = syncer


def wake(syncer: Syncer | None) -> bool:
    """Request path: a share was short; wake the request's process's syncer. False without one (limits are per
    process).

    A syncer whose task has not begun yet (the first request of a daphne process
    spawns it) counts: `wait_round` lets it begin."""
    if syncer is None:
        return False
    syncer.starved()
    return True


async def wait_round(syncer: Syncer | None, timeout_s: float) -> bool:
    """Request path, only when a share is short: wait for one of `syncer`'s background rounds."""
    return syncer is not None and await syncer.wait_round(timeout_s)


async def after_others_rounds(syncer: Syncer | None, deadline: float) -> None:
    """Request path, only for a request a round refused: sleep 1.5 sync intervals (bounded by the
    monotonic `deadline`), by when every other active process has planned a round since."""
    if syncer is None:
        return
    delay = min(time.monotonic() + 1.5 * syncer.interval_s, deadline) - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def wait_for_lease(syncer: Syncer | None, account: Account, timeout_s: float) -> bool:
    """Request path, only when a shared budget's lease is too small: True when a round ended (its lease
    may have grown: admit again); False when none can help (on an outage share) or none ended in time."""
    if syncer is not None and syncer.degraded and account.key in syncer._outage:
        return False  # on its outage share already: no round can give it more until Redis is back
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while await wait_round(syncer, max(0.0, end - loop.time())):
        if syncer is None or not syncer.reseeding or loop.time() >= end:
            return True
        # Redis lost the counters and one process is rebuilding them: no round grants anything
        # until it is done, so wait for it (bounded by the caller's deadline)
    return False


async def wait_loaded(spend: SpendLoader | None, timeout_s: float) -> bool:
    """Request path, once per new account: wait (bounded) for the next pass of `spend`, the request's process's
    loader.

    False when none runs in that process (tests of the request path alone)."""
    if spend is None:
        return False
    return await spend.wait_loaded(timeout_s)
