"""One link's tries: its calls with retries and backoff, its breaker charged once (docs/resilience.md).

`try_link` calls one link (a model's one provider, or one deployment) until it serves, the
request ends there, or its tries are spent; the walk then decides on fallback. A capacity
refusal under an adaptive limit goes back to the deployment's queue without spending a
retry (docs/resilience.md#capacity); a quota refusal parks the link, a refused credential
marks it misconfigured (docs/errors.md#upstream).
"""

from __future__ import annotations

import asyncio
from typing import Any

from routing.core import errors
from routing.core.admission_queue import Gate, Shed
from routing.core.backoff import backoff_delay
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.overload_gate import within_limit
from routing.core.parts import ExecutorParts
from routing.core.resilience import Resilience
from routing.core.settlement import Settlement
from routing.core.walk import Link, Outcome, Walk, plural

# A capacity refusal under an adaptive limit sends the request back to the deployment's queue this many
# times at most, without spending its max_retries (docs/resilience.md#capacity).
CAPACITY_REQUEUES = 3


async def try_link(
    parts: ExecutorParts,
    link: Link,
    probe: int,
    walk: Walk,
    max_tries: int | None = None,
    label: str | None = None,
    requeue: bool = True,
) -> Outcome | None:
    """Call one link with its retries, charging its breaker once. The Outcome when the request ends
    here (served, total timeout, a failure not to retry elsewhere); None when the link failed after its
    retries (`walk.last_failure`), for `run` to decide on fallback. `requeue=False`: a capacity refusal
    does not wait in this link's queue again (another deployment has room)."""
    breakers = parts.breakers
    res = walk.res
    max_tries = max_tries or 1 + max(res.max_retries, 0)
    key, org, model_id = link.breaker_key, link.org, link.model.id
    parts.budgets.record_request(key)
    gates = parts.gates
    gate = gates.gate(key, model_id, label or model_id) if gates.on else None  # docs/overload.md
    tries = requeues = 0
    failure: UpstreamFailure | None = None
    capacity = False  # the last failure was a capacity refusal under the gate: never the breaker's
    note = ""
    settled = False
    try:
        while True:
            now = parts.clock()
            if now >= walk.deadline:
                if failure is not None and failure.is_provider_fault and not failure.is_timeout and not capacity:
                    breakers.record_failure(key, probe, org, failure.charges_link)
                    settled = True
                walk.trail.append((model_id, "total_timeout"))
                return walk.fail(errors.total_timeout(), link)
            tries += 1
            walk.attempts += 1
            got = await _attempt(parts, link, probe, walk, gate, now)
            if isinstance(got, Outcome):  # served, or ended here (total timeout, unsendable)
                settled = got.error is None
                return got
            if isinstance(got, Shed):  # the gate shed it before any call (docs/overload.md#shedding)
                parts.breakers.release(key, probe, org)  # not the provider's doing: its breaker is untouched
                failure, settled = got, True
                break
            failure = got
            if not failure.is_provider_fault:
                # the provider answered (4xx, context length, content filter): not its fault
                if probe:
                    breakers.record_success(key, probe, org)
                settled = True
                break
            if not failure.is_retryable:  # invalid body: charged, never retried or failed over
                breakers.record_failure(key, probe, org, failure.charges_link)
                settled = True
                walk.trail.append((model_id, failure.label))
                return walk.fail(failure.to_gateway_error(), link)
            if parts.clock() >= walk.deadline:
                continue  # reported as total_timeout at the top of the loop
            capacity = gate is not None and failure.is_capacity  # docs/resilience.md#capacity
            if capacity and requeue and requeues < CAPACITY_REQUEUES:
                requeues += 1  # back to the gate's queue (its limit just fell), not one of max_retries
                delay, note = _requeue_delay(parts, key, res, failure, requeues, walk.deadline)
            elif tries - requeues >= max_tries:
                break
            else:
                delay, note = _retry_delay(parts, key, res, failure, tries - requeues, walk.deadline)
            if note:
                break
            await parts.sleep(delay)
        if not settled and not capacity:
            breakers.record_failure(key, probe, org, failure.charges_link)
            settled = True
    finally:
        if not settled:  # cancelled, crashed or refused for capacity: the provider's health unknown
            breakers.release(key, probe, org)
    walk.gave_up(failure, model_id, f"{label or model_id}: ", f" after {tries} {plural(tries)}{note}")
    return None


async def _attempt(
    parts: ExecutorParts, link: Link, probe: int, walk: Walk, gate: Gate | None, now: float
) -> Outcome | UpstreamFailure | Shed:
    """One upstream call: the Outcome when it ends the request (served, total timeout, a request
    this link cannot take), else its classified failure for `try_link` to retry or report (a
    Shed: the gate refused it before any call)."""
    obs = parts.observer
    cm = asyncio.timeout(walk.deadline - now)
    try:
        async with cm:
            if gate is None:
                result = await walk.attempt(link, walk.deadline)
            else:
                result = await within_limit(parts, gate, walk.attempt, link, walk.deadline, walk.priority)
    except Shed as f:
        walk.attempts -= 1
        return f
    except UpstreamFailure as f:
        walk.upstream_s += parts.clock() - now
        if f.kind is FailureKind.QUOTA_EXHAUSTED:  # skipped until its reset (docs/errors.md#upstream)
            parts.parking.park(link.breaker_key, f.retry_after_s or walk.res.quota_park_s, f.message)
        elif f.kind is FailureKind.AUTHENTICATION:
            parts.parking.misconfigure(link.breaker_key, f.message)
        if obs is not None:
            obs.attempt(link, f.label)
        return f
    except TimeoutError:
        walk.upstream_s += parts.clock() - now
        if cm.expired():
            if obs is not None:
                obs.attempt(link, "total_timeout")
            walk.trail.append((link.model.id, "total_timeout"))
            return walk.fail(errors.total_timeout(), link)
        failure = UpstreamFailure(FailureKind.READ_TIMEOUT, "the upstream call timed out")
        if obs is not None:
            obs.attempt(link, failure.label)
        return failure
    except GatewayError as e:  # the request cannot be sent to this link at all
        walk.attempts -= 1
        walk.trail.append((link.model.id, e.code))
        return walk.fail(e, link)
    except asyncio.CancelledError:
        if obs is not None:
            obs.attempt(link, "cancelled")
        raise
    walk.upstream_s += parts.clock() - now
    if parts.parking.misconfigured:
        parts.parking.served(link.breaker_key)
    if obs is not None:
        obs.attempt(link, "ok")
    walk.trail.append((link.model.id, "ok"))
    return _served(parts, result, link, probe, walk, gate)


def _served(parts: ExecutorParts, result: Any, link: Link, probe: int, walk: Walk, gate: Gate | None) -> Outcome:
    """The served Outcome; the breaker is charged now, or by its Settlement (a stream, at its end)."""
    outcome = walk.done(result, link)
    key, org = link.breaker_key, link.org
    if walk.settle_later:
        outcome.settlement = Settlement(parts.breakers, key, probe, org)
        if gate is not None:  # a stream holds its slot until it ends
            outcome.settlement.then(gate.release)
    else:
        parts.breakers.record_success(key, probe, org)
        if gate is not None:
            gate.release()
    return outcome


def _requeue_delay(
    parts: ExecutorParts, key: Any, res: Resilience, failure: UpstreamFailure, requeues: int, deadline: float
) -> tuple[float, str]:
    """Before the `requeues`-th try after a capacity refusal: the upstream's Retry-After if it sent one,
    else none the first time (the limit it lowered paces the queue), then the usual backoff; the retry
    budget and the deadline bound it as any retry (docs/resilience.md#capacity)."""
    if not parts.budgets.try_spend_retry(key, res.retry_budget_ratio, res.retry_budget_min_per_s):
        return 0.0, ", retry budget spent"
    delay = failure.retry_after_s or 0.0
    if requeues > 1:
        base, top = res.backoff_base_ms / 1000.0, res.backoff_max_ms / 1000.0
        delay = backoff_delay(requeues - 2, base, top, failure.retry_after_s, parts.rand())
    if parts.clock() + delay >= deadline:
        return 0.0, ", next retry would pass the deadline"
    return delay, ""


def _retry_delay(
    parts: ExecutorParts, key: Any, res: Resilience, failure: UpstreamFailure, tries: int, deadline: float
) -> tuple[float, str]:
    """(backoff before the next try, "") or (0, why there is no next try): the retry budget, the deadline."""
    if not parts.budgets.try_spend_retry(key, res.retry_budget_ratio, res.retry_budget_min_per_s):
        return 0.0, ", retry budget spent"
    delay = backoff_delay(
        tries - 1, res.backoff_base_ms / 1000.0, res.backoff_max_ms / 1000.0, failure.retry_after_s, parts.rand()
    )
    if parts.clock() + delay >= deadline:
        return 0.0, ", next retry would pass the deadline"
    return delay, ""
