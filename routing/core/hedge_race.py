"""A hedged call (docs/overload.md#hedging): when a deployment's first token is late, ask another.

`hedge_delay` says after how long a call is hedged (routing.core.hedging keeps the
first-token times and the budget); `hedged` races the first deployment against one other
whose breaker is closed and that has room, keeps whichever commits first, cancels the
other at once, and merges both calls' walks into the request's.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from routing.core.admission_queue import PriorityTicket
from routing.core.breaker import State
from routing.core.link_tries import try_link
from routing.core.parts import ExecutorParts
from routing.core.picking import Target
from routing.core.walk import Link, Outcome, Walk


@dataclass(slots=True)
class Race:
    """A hedged call's first deployment and what its hedge needs (docs/overload.md#hedging)."""

    first: Target
    probe: int
    tries: int
    delay: float


def hedge_delay(
    parts: ExecutorParts,
    link: Link,
    key: Any,
    left: list[Target],
    settle_later: bool,
    ticket: PriorityTicket | None,
) -> float | None:
    """After how long this request's call to `key` is hedged; None: not hedged (docs/overload.md#hedging)."""
    hedges = parts.hedges
    if not hedges.on or not left or ticket is None or not ticket.hedge:  # off, non-idempotent, or not admitted
        return None
    if settle_later and ticket.discard is None:  # a stream the caller cannot close if it loses
        return None
    return hedges.delay(link.model.id, key, ticket.tools)


async def hedged(parts: ExecutorParts, link: Link, race: Race, left: list[Target], walk: Walk) -> Outcome | None:
    """Call `race.first`; if it has not answered after `race.delay`, call another deployment too and
    keep whichever commits first, cancelling the other at once. Each call charges its own breaker;
    a hedge launched is removed from `left` (it was tried). Returns like `try_link`."""
    model_id = link.model.id
    first = race.first
    wa = walk.sub()
    a = asyncio.ensure_future(try_link(parts, first.link, race.probe, wa, race.tries, f"{model_id}@{first.name}"))
    calls: list[tuple[asyncio.Future, Target, Walk]] = [(a, first, wa)]
    winner = None
    try:
        done, _ = await asyncio.wait({a}, timeout=race.delay)
        if not done:
            _launch_hedge(parts, link, left, walk, calls)
        pending = {c[0] for c in calls}
        while pending and winner is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut, _, _ in calls:  # the first call wins a tie
                if fut in done and fut.exception() is None:
                    out = fut.result()
                    if out is not None and out.error is None:
                        winner = fut
                        break
    finally:
        for fut, _, _ in calls:
            if fut is not winner:
                fut.cancel()
        await asyncio.gather(*(c[0] for c in calls if c[0] is not winner), return_exceptions=True)
    return await _settle_race(parts, calls, winner, race, walk)


def _launch_hedge(
    parts: ExecutorParts, link: Link, left: list[Target], walk: Walk, calls: list[tuple[asyncio.Future, Target, Walk]]
) -> None:
    """Send the hedge to the best other deployment that has room and whose breaker is closed."""
    now = parts.clock()
    others = [
        t for t in left if parts.breakers.state(t.key) is State.CLOSED and parts.picker.room_s(t, walk.tokens, now) == 0
    ]  # fmt: skip
    second = parts.picker.pick(link.routing, others, parts.rand) if others else None
    if second is None or not parts.hedges.spend(link.model.id):
        return
    adm = parts.breakers.admit(second.key, second.link.org)
    if not adm.allowed:
        return
    left.remove(second)
    parts.picker.take(second, walk.tokens)
    parts.picker.started(second.key)
    wb = walk.sub()
    b = asyncio.ensure_future(try_link(parts, second.link, adm.probe, wb, 1, f"{link.model.id}@{second.name}"))
    calls.append((b, second, wb))


async def _settle_race(
    parts: ExecutorParts,
    calls: list[tuple[asyncio.Future, Target, Walk]],
    winner: asyncio.Future | None,
    race: Race,
    walk: Walk,
) -> Outcome | None:
    """Merge the calls' walks, free what lost, and say what the request ends with."""
    ended: Outcome | None = None
    served: Link | None = None
    for fut, target, sub in calls:
        walk.absorb(sub)
        out = None if fut.cancelled() or fut.exception() is not None else fut.result()
        if fut is winner:
            ended, served = out, target.link
        elif out is not None and out.error is None:  # committed in the same instant: not needed
            if out.settlement is not None:
                out.settlement.release()
            discard = walk.priority.discard if walk.priority is not None else None
            if discard is not None:
                await discard(out.result)
        elif ended is None and out is not None:  # this call ended the request (deadline, 4xx)
            ended, served = out, target.link
        if target is not race.first:  # the hedge's in-flight count, as the caller does for the first
            settlement = out.settlement if out is not None and fut is winner else None
            if settlement is None:
                parts.picker.finished(target.key)
            else:
                settlement.then(functools.partial(parts.picker.finished, target.key))
    for fut, _, _ in calls:
        if fut is not winner and not fut.cancelled() and fut.exception() is not None:
            raise fut.exception()  # a bug in a call: not swallowed
    if len(calls) > 1:
        parts.hedges.note("won" if winner is calls[1][0] else "lost" if winner is not None else "failed")
    if ended is None:
        return None
    walk.last = served
    return walk.rewrite(ended, served)
