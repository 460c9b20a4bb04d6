"""A model with several deployments: each try picks one, by its routing, among those that can take it
(docs/deployments.md#retry-and-fallback).

The pick honours capacity (routing.core.capacity_leases), the breakers, quota parks and
conversation affinity (routing.core.affinity); the chosen deployment is called with its
tries (routing.core.link_tries), hedged when due (routing.core.hedge_race), and counted in
flight and timed by the picker (routing.core.picking) while it runs.
"""

from __future__ import annotations

import functools

from routing.core.affinity import conversation
from routing.core.breaker import State
from routing.core.capacity_leases import await_lease, ready
from routing.core.failures import FailureKind
from routing.core.hedge_race import Race, hedge_delay, hedged
from routing.core.link_tries import try_link
from routing.core.parts import ExecutorParts
from routing.core.picking import Target
from routing.core.spread import Spread, none_served
from routing.core.walk import Link, Outcome, Walk


async def try_deployments(parts: ExecutorParts, link: Link, walk: Walk) -> tuple[Outcome | None, str | None]:
    """Try the deployments of one model (docs/deployments.md#retry-and-fallback).

    Each try picks, by the model's routing, a deployment not yet tried by this
    request that has capacity left and whose breaker admits. A failure that would be
    retried moves to another such deployment when there is one (no backoff: a
    different upstream); only the last deployment standing spends the model's
    remaining retries, so a model makes `1 + max_retries` upstream calls at most, or
    one per deployment when it has more. Each deployment's breaker is charged once.

    With capacity shared across processes (docs/deployments.md#capacity), a deployment
    whose local share is short is passed over while another can serve; when none
    can, the request waits (bounded) for one background lease round, once.

    Returns (Outcome, None) when the request ends here; (None, None) when tries
    failed (`walk.last_failure`); (None, "circuit_open" | "capacity") when nothing
    was tried because every deployment was open, or at capacity.
    """
    res = walk.res
    spread = Spread(link.deployments, 1 + max(res.max_retries, 0))
    while spread.left:
        now = parts.clock()
        eligible, short = ready(parts, spread, walk.tokens, now)
        if not eligible:
            if short and await await_lease(parts, spread, walk.deadline, now):
                continue
            break
        if link.model.affinity_s and (pin := conversation.get()) is not None:  # docs/deployments.md#affinity
            target = parts.picker.pick_pinned(link, eligible, parts.rand, pin, parts.closed)
        else:
            target = parts.picker.pick(link.routing, eligible, parts.rand)
        assert target is not None
        spread.left.remove(target)
        adm = parts.breakers.admit(target.key, target.link.org)
        if not adm.allowed:
            wait = adm.retry_after_s
            spread.open_wait = wait if spread.open_wait is None or wait < spread.open_wait else spread.open_wait
            continue
        before = walk.attempts
        ended = await _call_deployment(parts, link, target, adm.probe, spread, walk, now)
        if ended is not None:
            return ended, None
        spread.failed = True
        spread.tries_left = max(spread.tries_left - (walk.attempts - before), 1)
        failure = walk.last_failure
        assert failure is not None
        if failure.kind is FailureKind.QUOTA_EXHAUSTED:
            continue  # this deployment's account is out of quota (now parked): another one may serve
        if not (failure.is_provider_fault and failure.is_retryable):
            return None, None  # the provider answered (4xx, context length...): not another deployment's job
    return None, none_served(parts.parking, spread, link.model.id, walk)


async def _call_deployment(
    parts: ExecutorParts, link: Link, target: Target, probe: int, spread: Spread, walk: Walk, now: float
) -> Outcome | None:
    """Call one admitted deployment (hedged when due), counting it in flight; returns like `try_link`."""
    picker = parts.picker
    tokens = walk.tokens
    picker.take(target, tokens)
    others = any(
        t is not target
        and parts.breakers.state(t.key) is State.CLOSED
        and picker.room_s(t, tokens, now, hint=False) == 0
        for t in spread.left
    )
    walk.last = target.link
    before = walk.attempts
    key = target.key
    picker.started(key)
    started = parts.clock()
    ended = None
    tries = 1 if others else spread.tries_left
    delay = hedge_delay(parts, link, key, spread.left, walk.settle_later, walk.priority) if parts.hedges.on else None
    try:
        if delay is None:
            label = f"{link.model.id}@{target.name}"
            ended = await try_link(parts, target.link, probe, walk, tries, label, requeue=not others)
        else:
            ended = await hedged(parts, link, Race(target, probe, tries, delay), spread.left, walk)
    finally:
        settlement = ended.settlement if ended is not None and walk.last is target.link else None
        if settlement is None:
            picker.finished(key)
        else:  # a stream stays in flight until it ends
            settlement.then(functools.partial(picker.finished, key))
    one_call = walk.attempts - before == 1  # one call: its time is the figure
    if ended is not None:
        if ended.error is None and one_call:
            picker.observe(key, parts.clock() - started)
            if parts.hedges.on:
                parts.hedges.observe(key, parts.clock() - started)
    elif one_call and walk.last_failure is not None and walk.last_failure.is_timeout:
        picker.observe(key, parts.clock() - started)
    return ended
