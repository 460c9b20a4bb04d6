"""The request path's side of shared limits: what a request does when its share is short.

The request path never calls Redis. A request the local share cannot cover wakes its process's
syncer (`Process.syncer`, routing.runtime.cluster.shared_leases) and waits, bounded, for the rounds
that lease what it needs; a request of a new budget account waits, bounded, for the spend loader's
next pass (`Process.spend`, routing.runtime.cluster.shared_spend). Without a syncer (no REDIS_URL)
limits are per process and nothing here waits.
"""

from __future__ import annotations

import asyncio
import time

from routing.core.budget_accounts import Account
from routing.runtime.cluster.shared_leases import Syncer
from routing.runtime.process import installed


def _syncer() -> Syncer | None:
    process = installed()
    return process.syncer if process is not None else None


def install(syncer: Syncer | None) -> None:
    """Make `syncer` the current process's (None: budgets are per process)."""
    process = installed()
    if process is not None:
        process.syncer = syncer


def wake() -> bool:
    """Request path: a share was short; wake the syncer. False when none is installed (limits are per process).

    An installed syncer whose task has not begun yet (the first request of a daphne process
    spawns it) counts: `wait_round` lets it begin."""
    syncer = _syncer()
    if syncer is None:
        return False
    syncer.starved()
    return True


async def wait_round(timeout_s: float) -> bool:
    """Request path, only when a share is short: wait for one background round."""
    syncer = _syncer()
    return syncer is not None and await syncer.wait_round(timeout_s)


async def after_others_rounds(deadline: float) -> None:
    """Request path, only for a request a round refused: sleep 1.5 sync intervals (bounded by the
    monotonic `deadline`), by when every other active process has planned a round since."""
    syncer = _syncer()
    if syncer is None:
        return
    delay = min(time.monotonic() + 1.5 * syncer.interval_s, deadline) - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def wait_for_lease(account: Account, timeout_s: float) -> bool:
    """Request path, only when a shared budget's lease is too small: True when a round ended (its lease
    may have grown: admit again); False when none can help (on an outage share) or none ended in time."""
    syncer = _syncer()
    if syncer is not None and syncer.degraded and account.key in syncer._outage:
        return False  # on its outage share already: no round can give it more until Redis is back
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while await wait_round(max(0.0, end - loop.time())):
        if syncer is None or not syncer.reseeding or loop.time() >= end:
            return True
        # Redis lost the counters and one process is rebuilding them: no round grants anything
        # until it is done, so wait for it (bounded by the caller's deadline)
    return False


async def wait_loaded(timeout_s: float) -> bool:
    """Request path, once per new account: wait (bounded) for the spend loader's next pass.

    False when no loader runs in this process (tests of the request path alone)."""
    process = installed()
    if process is None or process.spend is None:
        return False
    return await process.spend.wait_loaded(timeout_s)
