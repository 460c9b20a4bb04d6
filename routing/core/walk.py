"""One request's walk along its fallback chain: the `Link`s it walks, what has happened so far
(`Walk`), and the `Outcome` it ends with (docs/resilience.md).

The executor (routing.core.executor) moves the walk from link to link; a link's tries
(routing.core.link_tries), a model's deployments (routing.core.deployment_tries) and a hedge
race (routing.core.hedge_race) record into it. Plain data and bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from routing.core import errors
from routing.core.admission_queue import PriorityTicket, Shed
from routing.core.breaker import BreakerKey
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.parking import Parking
from routing.core.picking import Target
from routing.core.resilience import LinkModel, Resilience
from routing.core.settlement import Settlement

# Hops the org may not use or that do not exist: skipped without becoming a fallback reason.
SILENT_SKIPS = frozenset({"model_denied", "model_not_found"})


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


class Observer(Protocol):
    def attempt(self, link: Link, outcome_label: str) -> None: ...

    def fallback(self, from_model: str, to_model: str, reason: str) -> None: ...


def skip_error(reason: str, model: str) -> GatewayError:
    if reason == "context_length":
        return errors.context_length_exceeded(model)
    if reason == "model_denied":
        return errors.model_denied(model)
    if reason == "model_not_found":
        return errors.model_not_found(model)
    return errors.no_servable_link(model)


def plural(n: int) -> str:
    return "attempt" if n == 1 else "attempts"


class Walk:
    """One request's walk along its chain: what it calls with (fixed for the run), what has happened
    so far, and every Outcome it ends with. A hedged call walks on a `sub` walk, merged by `absorb`."""

    __slots__ = (
        "attempt",
        "res",
        "deadline",
        "settle_later",
        "tokens",
        "priority",
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
        priority: PriorityTicket | None = None,
    ) -> None:
        self.attempt = attempt  # one upstream try: a result, or UpstreamFailure
        self.res = res
        self.deadline = deadline  # on the executor's clock
        self.settle_later = settle_later  # the caller settles the serving link's breaker (a stream)
        self.tokens = tokens  # the request's estimate, against deployments' tpm capacity
        self.priority = priority  # the request's place in the gates' queues and its hedging (routing.runtime.overload)
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

    def sub(self) -> Walk:
        """A fresh walk with this one's constants, for one call of a hedge race."""
        return Walk(self.attempt, self.res, self.deadline, self.settle_later, self.tokens, self.priority)

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

    def absorb(self, other: Walk) -> None:
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
                error = skip_error(*self.first_skip)
            else:
                error = errors.upstream_unavailable("the chain has no model")
        elif self.involved == 1 or isinstance(failure, Shed):  # the last model shed it: `overloaded` (docs/overload.md)
            error = failure.to_gateway_error()
        else:
            error = errors.upstream_unavailable("; ".join(self.details or ()))
        return self.fail(error, last)


def parked(parking: Parking, key: Any, model_id: str, walk: Walk) -> bool:
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


def window(model: Any, unknown: int = 1 << 62) -> int:
    """A model's context window; one not configured is assumed large (it may fit), unless `unknown` says."""
    size = getattr(model, "context_window", None)
    return size if isinstance(size, int) else unknown
