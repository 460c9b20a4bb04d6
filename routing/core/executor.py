"""The one generic executor: breaker gate, retries, backoff, fallback, deadline (docs/resilience.md).

It knows nothing about chat, embeddings or rerank: it walks a resolved chain of
`Link`s and calls `attempt(link, deadline)` for each upstream try. `attempt`
returns a result or raises `UpstreamFailure` (classified in routing.core.failures, the
single source of truth for retry, fallback and breaker decisions).

One logical request charges each link's breaker once: one success, or one failure
after that link's retries. Clock, sleep and randomness are injected so tests run in
simulated time.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from routing.core import errors
from routing.core.admission_queue import Gate, Gates, Shed, current
from routing.core.affinity import conversation
from routing.core.backoff import backoff_delay
from routing.core.breaker import BreakerKey, BreakerRegistry, State
from routing.core.buckets import LEASE_WAIT_S
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.hedging import Hedges
from routing.core.parking import Parking
from routing.core.picking import Balancer, Target
from routing.core.resilience import LinkModel, Resilience
from routing.core.retry_budget import RetryBudgets

T = TypeVar("T")

# Hops the org may not use or that do not exist: skipped without becoming a fallback reason.
SILENT_SKIPS = frozenset({"model_denied", "model_not_found"})
# Retry-After when a deployment's share stayed short after a lease round (the cluster bucket
# had room at the round before): about when the next rounds will have brought one.
_SHORT_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Link:
    model: LinkModel
    breaker_key: BreakerKey
    base_url: str
    api_key: str | None
    skip_reason: str | None = None
    # A model with several deployments (docs/deployments.md): each try picks one of these by
    # `routing`; empty for a model served by its one provider (this link itself).
    deployments: tuple[Target, ...] = ()
    routing: str = "weighted"
    # The requesting org, for its own view of a shared breaker (docs/resilience.md#org-views);
    # None on BYO links, whose breaker key already names the org.
    org: str | None = None


@dataclass(slots=True)
class Outcome:
    result: Any | None
    error: GatewayError | None
    link: Link | None  # the link that served, or the last one considered
    attempts: int  # upstream calls, retries and fallbacks included
    fallback_reason: str | None  # why the link before `link` was left; None when the first link served
    upstream_s: float  # time spent awaiting attempt(); the rest is gateway overhead
    trail: list[tuple[str, str]]  # (model id, what happened) per link considered
    # Set when the caller settles the serving link's breaker itself (a stream: at its end).
    settlement: Settlement | None = None


class Settlement:
    """The serving link's breaker charge, decided later (a stream's success is its clean end).

    Exactly one of `success`, `failure`, `release` takes effect; later calls do nothing.
    """

    __slots__ = ("_breakers", "_key", "_probe", "_threshold", "_cooldown", "_open", "_then", "_org")

    def __init__(
        self,
        breakers: BreakerRegistry,
        key: Any,
        probe: int,
        threshold: int,
        cooldown_s: float,
        org: str | None = None,
    ) -> None:
        self._breakers = breakers
        self._key = key
        self._probe = probe
        self._threshold = threshold
        self._cooldown = cooldown_s
        self._open = True
        self._org = org
        self._then: Callable[[], None] | None = None  # also run once settled (a deployment's in-flight count)

    def then(self, fn: Callable[[], None]) -> None:
        before = self._then
        self._then = fn if before is None else functools.partial(_both, before, fn)

    def _settled(self) -> None:
        fn = self._then
        if fn is not None:
            self._then = None
            fn()

    def success(self) -> None:
        if self._open:
            self._open = False
            self._breakers.record_success(self._key, self._probe, self._org)
            self._settled()

    def failure(self) -> None:
        """One breaker failure for the link (a committed stream that broke)."""
        if self._open:
            self._open = False
            self._breakers.record_failure(self._key, self._probe, self._threshold, self._cooldown, self._org)
            self._settled()

    def release(self) -> None:
        """Neither: the outcome says nothing about the provider (client gone, our deadline)."""
        if self._open:
            self._open = False
            self._breakers.release(self._key, self._probe, self._org)
            self._settled()


def _both(first: Callable[[], None], second: Callable[[], None]) -> None:
    try:
        first()
    finally:
        second()


# Timeouts lower a deployment's adaptive limit as its capacity refusals do (docs/overload.md), but
# still charge its breaker: a silent upstream may be a sick one.
_DROPS = frozenset({FailureKind.READ_TIMEOUT, FailureKind.FIRST_TOKEN_TIMEOUT})
# A capacity refusal under an adaptive limit sends the request back to the deployment's queue this many
# times at most, without spending its max_retries (docs/resilience.md#capacity).
CAPACITY_REQUEUES = 3


@dataclass(slots=True)
class _Race:
    """A hedged call's first deployment and what its hedge needs (docs/overload.md#hedging)."""

    first: Target
    probe: int
    tries: int
    delay: float


class Observer(Protocol):
    def attempt(self, link: Link, outcome_label: str) -> None: ...

    def fallback(self, from_model: str, to_model: str, reason: str) -> None: ...


def _skip_error(reason: str, model: str) -> GatewayError:
    if reason == "context_length":
        return errors.context_length_exceeded(model)
    if reason == "model_denied":
        return errors.model_denied(model)
    if reason == "model_not_found":
        return errors.model_not_found(model)
    return errors.no_servable_link(model)


def _plural(n: int) -> str:
    return "attempt" if n == 1 else "attempts"


class _Walk:
    """One request's walk along its chain: what it calls with (fixed for the run), what has happened
    so far, and every Outcome it ends with. A hedged call walks on a `sub` walk, merged by `absorb`."""

    __slots__ = (
        "attempt",
        "res",
        "deadline",
        "settle_later",
        "tokens",
        "discard",
        "too_long",
        "trail",
        "details",
        "attempts",
        "upstream_s",
        "reason",
        "prev_model",
        "last",
        "last_failure",
        "involved",
        "open_retry",
        "open_model",
        "full_retry",
        "full_model",
        "first_skip",
    )

    def __init__(
        self,
        attempt: Callable[[Link, float], Awaitable[Any]],
        res: Resilience,
        deadline: float,
        settle_later: bool = False,
        tokens: int = 0,
        discard: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.attempt = attempt  # one upstream try: a result, or UpstreamFailure
        self.res = res
        self.deadline = deadline  # on the executor's clock
        self.settle_later = settle_later  # the caller settles the serving link's breaker (a stream)
        self.tokens = tokens  # the request's estimate, against deployments' tpm capacity
        self.discard = discard  # closes a result that lost a hedge race; None: never hedged if settle_later
        self.too_long: int | None = None  # the window of a link that answered "context length exceeded"
        self.trail: list[tuple[str, str]] = []
        self.details: list[str] | None = None  # per-link explanation, built only when something fails
        self.attempts = 0
        self.upstream_s = 0.0
        self.reason: str | None = None  # why the previous link was left
        self.prev_model: str | None = None
        self.last: Link | None = None  # the last link tried or found open
        self.last_failure: UpstreamFailure | None = None
        self.involved = 0  # links tried or skipped as open
        self.open_retry: float | None = None  # the soonest open breaker's cooldown left
        self.open_model: str | None = None
        self.full_retry: float | None = None  # the soonest deployment capacity free again
        self.full_model: str | None = None
        self.first_skip: tuple[str, str] | None = None  # (reason, model id) of the skip that explains a dead chain

    def sub(self) -> _Walk:
        """A fresh walk with this one's constants, for one call of a hedge race."""
        return _Walk(self.attempt, self.res, self.deadline, self.settle_later, self.tokens, self.discard)

    def done(self, result: Any, link: Link) -> Outcome:
        return Outcome(result, None, link, self.attempts, self.reason, self.upstream_s, self.trail)

    def fail(self, error: GatewayError, link: Link | None) -> Outcome:
        return Outcome(None, error, link, self.attempts, self.reason, self.upstream_s, self.trail)

    def explain(self, detail: str) -> None:
        if self.details is None:
            self.details = []
        self.details.append(detail)

    def leave(self, model_id: str, reason: str | None) -> None:
        """The request moves on from this link; `reason` is what a serving fallback reports."""
        self.prev_model, self.reason = model_id, reason

    def skipped(self, model_id: str, skip: str) -> bool:
        """Record a preflight/policy skip; True when it is a visible hop (a fallback reason)."""
        self.trail.append((model_id, skip))
        first = self.first_skip
        if first is None or (first[0] in SILENT_SKIPS and skip not in SILENT_SKIPS):
            self.first_skip = (skip, model_id)
        return skip not in SILENT_SKIPS

    def gave_up(self, failure: UpstreamFailure, model_id: str, prefix: str, suffix: str) -> None:
        """A link failed after its tries: the failure the chain decides on, in the trail and the explanation."""
        self.last_failure = failure
        why = failure.fallback_reason or failure.label
        self.trail.append((model_id, why))
        self.explain(f"{prefix}{why}{suffix}")

    def found_open(self, model_id: str, retry_after_s: float) -> None:
        self.trail.append((model_id, "circuit_open"))
        if self.open_retry is None or retry_after_s < self.open_retry:
            self.open_retry, self.open_model = retry_after_s, model_id

    def found_full(self, model_id: str, retry_after_s: float) -> None:
        """Every admitting deployment of the model is at its rpm/tpm capacity."""
        self.trail.append((model_id, "at_capacity"))
        if self.full_retry is None or retry_after_s < self.full_retry:
            self.full_retry, self.full_model = retry_after_s, model_id

    def absorb(self, other: _Walk) -> None:
        """Take in what a hedged call's own walk saw (docs/overload.md#hedging)."""
        self.trail += other.trail
        for detail in other.details or ():
            self.explain(detail)
        self.attempts += other.attempts
        self.upstream_s += other.upstream_s
        if other.last_failure is not None:
            self.last_failure = other.last_failure

    def rewrite(self, outcome: Outcome, link: Link) -> Outcome:
        """A hedged call's Outcome, with the whole walk's figures."""
        outcome.link, outcome.attempts, outcome.trail = link, self.attempts, self.trail
        outcome.upstream_s, outcome.fallback_reason = self.upstream_s, self.reason
        return outcome

    def exhausted(self, chain: Sequence[Link]) -> Outcome:
        """Nothing served and no link ended the request itself: say why the chain as a whole failed."""
        last = self.last if self.last is not None or not chain else chain[0]
        failure = self.last_failure
        if failure is None:
            if self.full_retry is not None and self.open_retry is None:  # capacity alone stopped it
                error = errors.deployments_at_capacity(self.full_model or "", self.full_retry)
            elif self.open_retry is not None:
                error = errors.circuit_open(self.open_model or "", self.open_retry)
            elif self.first_skip is not None:
                error = _skip_error(*self.first_skip)
            else:
                error = errors.upstream_unavailable("the chain has no model")
        elif self.involved == 1 or isinstance(failure, Shed):  # the last model shed it: `overloaded` (docs/overload.md)
            error = failure.to_gateway_error()
        else:
            error = errors.upstream_unavailable("; ".join(self.details or ()))
        return self.fail(error, last)


class Executor:
    """Runs one logical request over a fallback chain."""

    def __init__(
        self,
        breakers: BreakerRegistry | None = None,
        budgets: RetryBudgets | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        observer: Observer | None = None,
        balancer: Balancer | None = None,
        gates: Gates | None = None,
        hedges: Hedges | None = None,
        parking: Parking | None = None,
    ) -> None:
        # Each part defaults to a fresh one: the composition root (gateway_project.process) passes the process's.
        self.breakers = breakers if breakers is not None else BreakerRegistry()
        self.budgets = budgets if budgets is not None else RetryBudgets()
        self.balancer = balancer if balancer is not None else Balancer()
        self.gates = gates if gates is not None else Gates()
        self.hedges = hedges if hedges is not None else Hedges()
        self.parking = parking if parking is not None else Parking()
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.observer = observer

    async def run(
        self,
        chain: Sequence[Link],
        attempt: Callable[[Link, float], Awaitable[T]],
        resilience: Resilience,
        deadline: float,
        settle_later: bool = False,
        tokens: int = 0,
        discard: Callable[[Any], Awaitable[None]] | None = None,
    ) -> Outcome:
        """Serve the request from the first link that can; `deadline` is on this executor's clock.

        With `settle_later` the serving link's breaker is not charged when `attempt`
        returns: the Outcome carries a `Settlement` the caller must settle (streams, whose
        success is a clean end, not the commit). `tokens` is the request's estimate,
        counted against deployments' `tpm` capacity. `discard` closes a result that lost a
        hedge race (an open stream); without it, streams are never hedged.
        """
        obs = self.observer
        walk = _Walk(attempt, resilience, deadline, settle_later, tokens, discard)
        for link in chain:
            model = link.model
            skip = link.skip_reason
            if skip is None and walk.too_long is not None and _window(model) <= walk.too_long:
                skip = "context_length"  # a prompt too long for that window is too long for this one (R2)
            if skip is not None:
                if walk.skipped(model.id, skip):
                    if walk.prev_model is not None and obs is not None:
                        obs.fallback(walk.prev_model, model.id, walk.reason or skip)
                    walk.explain(f"{model.id}: {skip}")
                    walk.leave(model.id, skip)
                continue
            if walk.prev_model is not None and obs is not None and walk.reason is not None:
                obs.fallback(walk.prev_model, model.id, walk.reason)
            walk.involved += 1
            walk.last = link
            if link.deployments:
                ended = await self._serve_deployments(link, walk)
            else:
                ended = await self._serve_link(link, walk)
            if ended is not None:
                return ended
        return walk.exhausted(chain)

    async def _serve_link(self, link: Link, walk: _Walk) -> Outcome | None:
        """A model served by its one provider: the request's Outcome, or None to go on down the chain."""
        model = link.model
        if self.parking.until and _parked(self.parking, link.breaker_key, model.id, walk):  # docs/errors.md#upstream
            failure = walk.last_failure
            assert failure is not None
            if "rate_limited" not in model.fallback_on:
                return walk.fail(failure.to_gateway_error(), link)
            walk.leave(model.id, failure.fallback_reason)
            return None
        res = walk.res
        adm = self.breakers.admit(link.breaker_key, res.breaker_failure_threshold, res.breaker_cooldown_s, link.org)
        if not adm.allowed:
            walk.found_open(model.id, adm.retry_after_s)
            if "circuit_open" not in model.fallback_on:
                return walk.fail(errors.circuit_open(model.id, adm.retry_after_s), link)
            walk.explain(f"{model.id}: circuit_open")
            walk.leave(model.id, "circuit_open")
            return None
        ended = await self._try_link(link, adm.probe, walk)
        return ended if ended is not None else _move_on(link, walk)

    async def _serve_deployments(self, link: Link, walk: _Walk) -> Outcome | None:
        """A model with deployments: the request's Outcome, or None to go on down the chain."""
        ended, why = await self._try_deployments(link, walk)
        if ended is not None:
            return ended
        model = link.model
        if why == "circuit_open":
            if "circuit_open" not in model.fallback_on:
                return walk.fail(errors.circuit_open(model.id, walk.open_retry or 0.0), walk.last)
            walk.explain(f"{model.id}: circuit_open (every deployment)")
            walk.leave(model.id, "circuit_open")
            return None
        if why == "capacity":
            if "rate_limited" not in model.fallback_on:
                return walk.fail(errors.deployments_at_capacity(model.id, walk.full_retry or 0.0), walk.last)
            walk.explain(f"{model.id}: every deployment at capacity")
            walk.leave(model.id, "upstream_429")
            return None
        return _move_on(link, walk)

    async def _try_deployments(self, link: Link, walk: _Walk) -> tuple[Outcome | None, str | None]:
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
        spread = _Spread(link.deployments, 1 + max(res.max_retries, 0))
        while spread.left:
            now = self.clock()
            eligible, short = self._eligible(spread, walk.tokens, now)
            if not eligible:
                if short and await self._await_lease(spread, walk.deadline, now):
                    continue
                break
            if link.model.affinity_s and (pin := conversation.get()) is not None:  # docs/deployments.md#affinity
                target = self.balancer.pick_pinned(link, eligible, self.rand, pin, self._closed)
            else:
                target = self.balancer.pick(link.routing, eligible, self.rand)
            assert target is not None
            spread.left.remove(target)
            adm = self.breakers.admit(
                target.key, res.breaker_failure_threshold, res.breaker_cooldown_s, target.link.org
            )
            if not adm.allowed:
                wait = adm.retry_after_s
                spread.open_wait = wait if spread.open_wait is None or wait < spread.open_wait else spread.open_wait
                continue
            before = walk.attempts
            ended = await self._call_deployment(link, target, adm.probe, spread, walk, now)
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
        return None, _none_served(self.parking, spread, link.model.id, walk)

    def _closed(self, key: Any) -> bool:
        return self.breakers.state(key) is State.CLOSED

    def _eligible(self, spread: _Spread, tokens: int, now: float) -> tuple[list[Target], bool]:
        """The deployments left that can take the request now, and whether one's shared share is short;
        notes the soonest capacity wait and a parked deployment on `spread`."""
        eligible = []
        short = False
        for t in spread.left:
            if self.parking.until and self.parking.parked_s(t.key) is not None:  # out of quota: skipped, no call
                spread.parked = t
                continue
            wait = self.balancer.room_s(t, tokens, now)
            if wait == 0:
                eligible.append(t)
            elif wait > 0:
                spread.full_wait = wait if spread.full_wait is None or wait < spread.full_wait else spread.full_wait
            else:
                short = True
        return eligible, short

    async def _await_lease(self, spread: _Spread, deadline: float, now: float) -> bool:
        """Every deployment left is short of its shared share: wait for lease rounds until one sees the
        cluster bucket lack it, within LEASE_WAIT_S; True when a round brought room (try again)."""
        if spread.lease_until is None:
            spread.lease_until = min(now + LEASE_WAIT_S, deadline)
        if now < spread.lease_until and await self.balancer.lease(spread.lease_until - now):
            return True
        spread.full_wait = _SHORT_RETRY_S if spread.full_wait is None else min(spread.full_wait, _SHORT_RETRY_S)
        return False

    async def _call_deployment(
        self, link: Link, target: Target, probe: int, spread: _Spread, walk: _Walk, now: float
    ) -> Outcome | None:
        """Call one admitted deployment (hedged when due), counting it in flight; returns like `_try_link`."""
        balancer = self.balancer
        tokens = walk.tokens
        balancer.take(target, tokens)
        others = any(
            t is not target
            and self.breakers.state(t.key) is State.CLOSED
            and balancer.room_s(t, tokens, now, hint=False) == 0
            for t in spread.left
        )
        walk.last = target.link
        before = walk.attempts
        key = target.key
        balancer.started(key)
        started = self.clock()
        ended = None
        tries = 1 if others else spread.tries_left
        delay = self._hedge_delay(link, key, spread.left, walk.settle_later, walk.discard) if self.hedges.on else None
        try:
            if delay is None:
                label = f"{link.model.id}@{target.name}"
                ended = await self._try_link(target.link, probe, walk, tries, label, requeue=not others)
            else:
                ended = await self._hedged(link, _Race(target, probe, tries, delay), spread.left, walk)
        finally:
            settlement = ended.settlement if ended is not None and walk.last is target.link else None
            if settlement is None:
                balancer.finished(key)
            else:  # a stream stays in flight until it ends
                settlement.then(functools.partial(balancer.finished, key))
        one_call = walk.attempts - before == 1  # one call: its time is the figure
        if ended is not None:
            if ended.error is None and one_call:
                balancer.observe(key, self.clock() - started)
                if self.hedges.on:
                    self.hedges.observe(key, self.clock() - started)
        elif one_call and walk.last_failure is not None and walk.last_failure.is_timeout:
            balancer.observe(key, self.clock() - started)
        return ended

    def _hedge_delay(self, link: Link, key: Any, left: list[Target], settle_later: bool, discard: Any) -> float | None:
        """After how long this request's call to `key` is hedged; None: not hedged (docs/overload.md#hedging)."""
        hedges = self.hedges
        if not hedges.on or not left or (settle_later and discard is None):
            return None
        ticket = current.get()
        if ticket is None or not ticket.hedge:  # marked non-idempotent by the operator, or not admitted
            return None
        return hedges.delay(link.model.id, key, ticket.tools)

    async def _hedged(self, link: Link, race: _Race, left: list[Target], walk: _Walk) -> Outcome | None:
        """Call `race.first`; if it has not answered after `race.delay`, call another deployment too and
        keep whichever commits first, cancelling the other at once. Each call charges its own breaker;
        a hedge launched is removed from `left` (it was tried). Returns like `_try_link`."""
        model_id = link.model.id
        first = race.first
        wa = walk.sub()
        a = asyncio.ensure_future(self._try_link(first.link, race.probe, wa, race.tries, f"{model_id}@{first.name}"))
        calls: list[tuple[asyncio.Future, Target, _Walk]] = [(a, first, wa)]
        winner = None
        try:
            done, _ = await asyncio.wait({a}, timeout=race.delay)
            if not done:
                self._launch_hedge(link, left, walk, calls)
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
        return await self._settle_race(calls, winner, race, walk)

    def _launch_hedge(
        self, link: Link, left: list[Target], walk: _Walk, calls: list[tuple[asyncio.Future, Target, _Walk]]
    ) -> None:
        """Send the hedge to the best other deployment that has room and whose breaker is closed."""
        now = self.clock()
        res = walk.res
        others = [
            t for t in left if self.breakers.state(t.key) is State.CLOSED and self.balancer.room_s(t, walk.tokens, now) == 0
        ]  # fmt: skip
        second = self.balancer.pick(link.routing, others, self.rand) if others else None
        if second is None or not self.hedges.spend(link.model.id):
            return
        adm = self.breakers.admit(second.key, res.breaker_failure_threshold, res.breaker_cooldown_s, second.link.org)
        if not adm.allowed:
            return
        left.remove(second)
        self.balancer.take(second, walk.tokens)
        self.balancer.started(second.key)
        wb = walk.sub()
        b = asyncio.ensure_future(self._try_link(second.link, adm.probe, wb, 1, f"{link.model.id}@{second.name}"))
        calls.append((b, second, wb))

    async def _settle_race(
        self,
        calls: list[tuple[asyncio.Future, Target, _Walk]],
        winner: asyncio.Future | None,
        race: _Race,
        walk: _Walk,
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
                if walk.discard is not None:
                    await walk.discard(out.result)
            elif ended is None and out is not None:  # this call ended the request (deadline, 4xx)
                ended, served = out, target.link
            if target is not race.first:  # the hedge's in-flight count, as the caller does for the first
                settlement = out.settlement if out is not None and fut is winner else None
                if settlement is None:
                    self.balancer.finished(target.key)
                else:
                    settlement.then(functools.partial(self.balancer.finished, target.key))
        for fut, _, _ in calls:
            if fut is not winner and not fut.cancelled() and fut.exception() is not None:
                raise fut.exception()  # a bug in a call: not swallowed
        if len(calls) > 1:
            self.hedges.note("won" if winner is calls[1][0] else "lost" if winner is not None else "failed")
        if ended is None:
            return None
        walk.last = served
        return walk.rewrite(ended, served)

    async def _gated(
        self, gate: Gate, attempt: Callable[[Link, float], Awaitable[Any]], link: Link, deadline: float
    ) -> Any:
        """One attempt within the deployment's adaptive limit; the slot is the caller's on success."""
        await self.gates.enter(gate, deadline)
        started = self.clock()
        try:
            result = await attempt(link, deadline)
        except UpstreamFailure as f:
            if f.is_capacity or f.kind in _DROPS:
                gate.dropped()
            gate.release()
            raise
        except TimeoutError:
            if self.clock() < deadline:  # the upstream's timeout, not the request's own
                gate.dropped()
            gate.release()
            raise
        except BaseException:
            gate.release()
            raise
        gate.sample(self.clock() - started)  # a stream's attempt ends at its first content frame
        return result

    async def _try_link(
        self,
        link: Link,
        probe: int,
        walk: _Walk,
        max_tries: int | None = None,
        label: str | None = None,
        requeue: bool = True,
    ) -> Outcome | None:
        """Call one link with its retries, charging its breaker once. The Outcome when the request ends
        here (served, total timeout, a failure not to retry elsewhere); None when the link failed after its
        retries (`walk.last_failure`), for `run` to decide on fallback. `requeue=False`: a capacity refusal
        does not wait in this link's queue again (another deployment has room)."""
        breakers = self.breakers
        res = walk.res
        threshold, cooldown = res.breaker_failure_threshold, res.breaker_cooldown_s
        max_tries = max_tries or 1 + max(res.max_retries, 0)
        key, org, model_id = link.breaker_key, link.org, link.model.id
        self.budgets.record_request(key)
        gates = self.gates
        gate = gates.gate(key, model_id, label or model_id) if gates.on else None  # docs/overload.md
        tries = requeues = 0
        failure: UpstreamFailure | None = None
        capacity = False  # the last failure was a capacity refusal under the gate: never the breaker's
        note = ""
        settled = False
        try:
            while True:
                now = self.clock()
                if now >= walk.deadline:
                    if failure is not None and failure.is_provider_fault and not failure.is_timeout and not capacity:
                        breakers.record_failure(key, probe, threshold, cooldown, org, failure.charges_link)
                        settled = True
                    walk.trail.append((model_id, "total_timeout"))
                    return walk.fail(errors.total_timeout(), link)
                tries += 1
                walk.attempts += 1
                got = await self._attempt(link, probe, walk, gate, now)
                if isinstance(got, Outcome):  # served, or ended here (total timeout, unsendable)
                    settled = got.error is None
                    return got
                if isinstance(got, Shed):  # the gate shed it before any call (docs/overload.md#shedding)
                    self.breakers.release(key, probe, org)  # not the provider's doing: its breaker is untouched
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
                    breakers.record_failure(key, probe, threshold, cooldown, org, failure.charges_link)
                    settled = True
                    walk.trail.append((model_id, failure.label))
                    return walk.fail(failure.to_gateway_error(), link)
                if self.clock() >= walk.deadline:
                    continue  # reported as total_timeout at the top of the loop
                capacity = gate is not None and failure.is_capacity  # docs/resilience.md#capacity
                if capacity and requeue and requeues < CAPACITY_REQUEUES:
                    requeues += 1  # back to the gate's queue (its limit just fell), not one of max_retries
                    delay, note = self._requeue_delay(key, res, failure, requeues, walk.deadline)
                elif tries - requeues >= max_tries:
                    break
                else:
                    delay, note = self._retry_delay(key, res, failure, tries - requeues, walk.deadline)
                if note:
                    break
                await self.sleep(delay)
            if not settled and not capacity:
                breakers.record_failure(key, probe, threshold, cooldown, org, failure.charges_link)
                settled = True
        finally:
            if not settled:  # cancelled, crashed or refused for capacity: the provider's health unknown
                breakers.release(key, probe, org)
        walk.gave_up(failure, model_id, f"{label or model_id}: ", f" after {tries} {_plural(tries)}{note}")
        return None

    async def _attempt(
        self, link: Link, probe: int, walk: _Walk, gate: Gate | None, now: float
    ) -> Outcome | UpstreamFailure | Shed:
        """One upstream call: the Outcome when it ends the request (served, total timeout, a request
        this link cannot take), else its classified failure for `_try_link` to retry or report (a
        Shed: the gate refused it before any call)."""
        obs = self.observer
        cm = asyncio.timeout(walk.deadline - now)
        try:
            async with cm:
                if gate is None:
                    result = await walk.attempt(link, walk.deadline)
                else:
                    result = await self._gated(gate, walk.attempt, link, walk.deadline)
        except Shed as f:
            walk.attempts -= 1
            return f
        except UpstreamFailure as f:
            walk.upstream_s += self.clock() - now
            if f.kind is FailureKind.QUOTA_EXHAUSTED:  # skipped until its reset (docs/errors.md#upstream)
                self.parking.park(link.breaker_key, f.retry_after_s or walk.res.quota_park_s, f.message)
            elif f.kind is FailureKind.AUTHENTICATION:
                self.parking.misconfigure(link.breaker_key, f.message)
            if obs is not None:
                obs.attempt(link, f.label)
            return f
        except TimeoutError:
            walk.upstream_s += self.clock() - now
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
        walk.upstream_s += self.clock() - now
        if self.parking.misconfigured:
            self.parking.served(link.breaker_key)
        if obs is not None:
            obs.attempt(link, "ok")
        walk.trail.append((link.model.id, "ok"))
        return self._served(result, link, probe, walk, gate)

    def _served(self, result: Any, link: Link, probe: int, walk: _Walk, gate: Gate | None) -> Outcome:
        """The served Outcome; the breaker is charged now, or by its Settlement (a stream, at its end)."""
        outcome = walk.done(result, link)
        key, org = link.breaker_key, link.org
        if walk.settle_later:
            res = walk.res
            outcome.settlement = Settlement(
                self.breakers, key, probe, res.breaker_failure_threshold, res.breaker_cooldown_s, org
            )
            if gate is not None:  # a stream holds its slot until it ends
                outcome.settlement.then(gate.release)
        else:
            self.breakers.record_success(key, probe, org)
            if gate is not None:
                gate.release()
        return outcome

    def _requeue_delay(
        self, key: Any, res: Resilience, failure: UpstreamFailure, requeues: int, deadline: float
    ) -> tuple[float, str]:
        """Before the `requeues`-th try after a capacity refusal: the upstream's Retry-After if it sent one,
        else none the first time (the limit it lowered paces the queue), then the usual backoff; the retry
        budget and the deadline bound it as any retry (docs/resilience.md#capacity)."""
        if not self.budgets.try_spend_retry(key, res.retry_budget_ratio, res.retry_budget_min_per_s):
            return 0.0, ", retry budget spent"
        delay = failure.retry_after_s or 0.0
        if requeues > 1:
            base, top = res.backoff_base_ms / 1000.0, res.backoff_max_ms / 1000.0
            delay = backoff_delay(requeues - 2, base, top, failure.retry_after_s, self.rand())
        if self.clock() + delay >= deadline:
            return 0.0, ", next retry would pass the deadline"
        return delay, ""

    def _retry_delay(
        self, key: Any, res: Resilience, failure: UpstreamFailure, tries: int, deadline: float
    ) -> tuple[float, str]:
        """(backoff before the next try, "") or (0, why there is no next try): the retry budget, the deadline."""
        if not self.budgets.try_spend_retry(key, res.retry_budget_ratio, res.retry_budget_min_per_s):
            return 0.0, ", retry budget spent"
        delay = backoff_delay(
            tries - 1, res.backoff_base_ms / 1000.0, res.backoff_max_ms / 1000.0, failure.retry_after_s, self.rand()
        )
        if self.clock() + delay >= deadline:
            return 0.0, ", next retry would pass the deadline"
        return delay, ""


class _Spread:
    """One model's deployments as one request tries them (docs/deployments.md#retry-and-fallback)."""

    __slots__ = ("left", "tries_left", "open_wait", "full_wait", "failed", "lease_until", "parked")

    def __init__(self, deployments: Sequence[Target], tries: int) -> None:
        self.left = list(deployments)  # not yet tried
        self.tries_left = tries  # the model's calls left, spent by the last deployment standing
        self.open_wait: float | None = None  # the soonest open breaker's cooldown left
        self.full_wait: float | None = None  # the soonest capacity free again
        self.failed = False  # a deployment was called and failed
        self.lease_until: float | None = None  # waiting for lease rounds (only while every one left is SHORT)
        self.parked: Target | None = None  # a deployment skipped because it is parked (docs/errors.md#upstream)


def _none_served(parking: Parking, spread: _Spread, model_id: str, walk: _Walk) -> str | None:
    """Why no deployment served: None (tried and failed, or all parked: `walk.last_failure`),
    "capacity" or "circuit_open" (nothing could be tried)."""
    if spread.failed:
        return None
    if spread.parked is not None and spread.full_wait is None and spread.open_wait is None:
        if _parked(parking, spread.parked.key, model_id, walk):
            return None  # every deployment left is parked: the fallback rule of a quota failure applies
    if spread.full_wait is not None:
        walk.found_full(model_id, spread.full_wait)
        return "capacity"
    walk.found_open(model_id, spread.open_wait or 0.0)
    return "circuit_open"


def _move_on(link: Link, walk: _Walk) -> Outcome | None:
    """After the link failed: the request's Outcome unless the model's `fallback_on` lets it move on."""
    model = link.model
    failure = walk.last_failure
    assert failure is not None
    trigger = failure.fallback_trigger
    if trigger is None or trigger not in model.fallback_on:
        return walk.fail(failure.to_gateway_error(), walk.last)
    if failure.kind is FailureKind.CONTEXT_LENGTH:
        walk.too_long = max(walk.too_long or 0, _window(model, 0))
    walk.leave(model.id, failure.fallback_reason)
    return None


def _parked(parking: Parking, key: Any, model_id: str, walk: _Walk) -> bool:
    """Whether `key` is parked (out of quota or credit); if so, the walk records it as that failure, with no call."""
    left = parking.parked_s(key)
    if left is None:
        return False
    walk.last_failure = UpstreamFailure(
        FailureKind.QUOTA_EXHAUSTED,
        f"{model_id} is out of quota or credit at its provider; skipped for {left:.0f} s more",
        429,
        left,
    )
    walk.trail.append((model_id, "quota_parked"))
    walk.explain(f"{model_id}: quota_parked")
    return True


def _window(model: Any, unknown: int = 1 << 62) -> int:
    """A model's context window; one not configured is assumed large (it may fit), unless `unknown` says."""
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) else unknown
