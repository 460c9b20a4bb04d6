"""Which of a model's deployments can take a request now, and the bounded wait for a lease round
(docs/deployments.md#capacity).

Each deployment's rpm/tpm capacity is counted by the picker (routing.core.picking). With
capacity shared across processes, a deployment whose local share is short (`SHORT`) is
passed over while another can serve; when every one left is short, the request waits, at
most LEASE_WAIT_S and within its deadline, for the background lessor's next round.
"""

from __future__ import annotations

from routing.core.buckets import LEASE_WAIT_S
from routing.core.parts import ExecutorParts
from routing.core.picking import Target
from routing.core.spread import Spread

# Retry-After when a deployment's share stayed short after a lease round (the cluster bucket
# had room at the round before): about when the next rounds will have brought one.
_SHORT_RETRY_S = 1.0


def ready(parts: ExecutorParts, spread: Spread, tokens: int, now: float) -> tuple[list[Target], bool]:
    """The deployments left that can take the request now, and whether one's shared share is short;
    notes the soonest capacity wait and a parked deployment on `spread`."""
    ready = []
    short = False
    for t in spread.left:
        if parts.parking.until and parts.parking.parked_s(t.key) is not None:  # out of quota: skipped, no call
            spread.parked = t
            continue
        wait = parts.picker.room_s(t, tokens, now)
        if wait == 0:
            ready.append(t)
        elif wait > 0:
            spread.full_wait = wait if spread.full_wait is None or wait < spread.full_wait else spread.full_wait
        else:
            short = True
    return ready, short


async def await_lease(parts: ExecutorParts, spread: Spread, deadline: float, now: float) -> bool:
    """Every deployment left is short of its shared share: wait for lease rounds until one sees the
    cluster bucket lack it, within LEASE_WAIT_S; True when a round brought room (try again)."""
    if spread.lease_until is None:
        spread.lease_until = min(now + LEASE_WAIT_S, deadline)
    if now < spread.lease_until and await parts.picker.lease(spread.lease_until - now):
        return True
    spread.full_wait = _SHORT_RETRY_S if spread.full_wait is None else min(spread.full_wait, _SHORT_RETRY_S)
    return False
