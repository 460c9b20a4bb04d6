"""The one generic executor: breaker gate, retries, backoff, fallback, deadline (CONTRACT R1–R7).

It knows nothing about chat, embeddings or rerank: it walks a resolved chain of
`Link`s and calls `attempt(link, deadline)` for each upstream try. `attempt`
returns a result or raises `UpstreamFailure` (classified in routing.core.errors, the
single source of truth for retry, fallback and breaker decisions).

One logical request charges each link's breaker once: one success, or one failure
after that link's retries. Clock, sleep and randomness are injected so tests run in
simulated time.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from routing.core import errors
from routing.core.backoff import backoff_delay
from routing.core.breaker import BreakerKey, BreakerRegistry
from routing.core.errors import FailureKind, GatewayError, UpstreamFailure
from routing.core.resilience import LinkModel, Resilience
from routing.core.retry_budget import RetryBudgets

T = TypeVar("T")

# Hops the org may not use or that do not exist: skipped without becoming a fallback reason.
SILENT_SKIPS = frozenset({"model_denied", "model_not_found"})


@dataclass(frozen=True, slots=True)
class Link:
    model: LinkModel
    breaker_key: BreakerKey
    base_url: str
    api_key: str | None
    skip_reason: str | None = None


@dataclass(slots=True)
class Outcome:
    result: Any | None
    error: GatewayError | None
    link: Link | None  # the link that served, or the last one considered
    attempts: int  # upstream calls, retries and fallbacks included
    fallback_reason: str | None  # why the link before `link` was left; None when the first link served
    upstream_s: float  # time spent awaiting attempt(); the rest is gateway overhead
    trail: list[tuple[str, str]]  # (model id, what happened) per link considered


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
    ) -> None:
        if breakers is None:
            from routing.core.breaker import registry as breakers
        if budgets is None:
            from routing.core.retry_budget import budgets
        self.breakers = breakers
        self.budgets = budgets
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
    ) -> Outcome:
        """Serve the request from the first link that can; `deadline` is on this executor's clock."""
        clock = self.clock
        breakers = self.breakers
        obs = self.observer
        threshold = resilience.breaker_failure_threshold
        cooldown = resilience.breaker_cooldown_s
        max_tries = 1 + max(resilience.max_retries, 0)

        trail: list[tuple[str, str]] = []
        details: list[str] | None = None  # per-link explanation, built only when something fails
        attempts = 0
        upstream_s = 0.0
        reason: str | None = None  # why the previous link was left
        prev_model: str | None = None
        last: Link | None = None
        last_failure: UpstreamFailure | None = None
        involved = 0  # links tried or skipped as open
        open_retry: float | None = None
        open_model: str | None = None
        first_skip: tuple[str, str] | None = None

        for link in chain:
            model = link.model
            skip = link.skip_reason
            if skip is not None:
                trail.append((model.id, skip))
                if first_skip is None or (first_skip[0] in SILENT_SKIPS and skip not in SILENT_SKIPS):
                    first_skip = (skip, model.id)
                if skip in SILENT_SKIPS:
                    continue
                if prev_model is not None and obs is not None:
                    obs.fallback(prev_model, model.id, reason or skip)
                if details is None:
                    details = []
                details.append(f"{model.id}: {skip}")
                prev_model, reason = model.id, skip
                continue

            if prev_model is not None and obs is not None and reason is not None:
                obs.fallback(prev_model, model.id, reason)
            involved += 1
            last = link
            key = link.breaker_key
            adm = breakers.admit(key, threshold, cooldown)
            if not adm.allowed:
                trail.append((model.id, "circuit_open"))
                if open_retry is None or adm.retry_after_s < open_retry:
                    open_retry, open_model = adm.retry_after_s, model.id
                if "circuit_open" not in model.fallback_on:
                    return Outcome(
                        None,
                        errors.circuit_open(model.id, adm.retry_after_s),
                        link,
                        attempts,
                        reason,
                        upstream_s,
                        trail,
                    )
                if details is None:
                    details = []
                details.append(f"{model.id}: circuit_open")
                prev_model, reason = model.id, "circuit_open"
                continue

            probe = adm.probe
            self.budgets.record_request(key)
            tries = 0
            failure: UpstreamFailure | None = None
            note = ""
            settled = False
            try:
                while True:
                    now = clock()
                    if now >= deadline:
                        if failure is not None and failure.is_provider_fault and not failure.is_timeout:
                            breakers.record_failure(key, probe, threshold, cooldown)
                            settled = True
                        trail.append((model.id, "total_timeout"))
                        return Outcome(None, errors.total_timeout(), link, attempts, reason, upstream_s, trail)
                    tries += 1
                    attempts += 1
                    cm = asyncio.timeout(deadline - now)
                    try:
                        async with cm:
                            result = await attempt(link, deadline)
                    except UpstreamFailure as f:
                        upstream_s += clock() - now
                        failure = f
                        if obs is not None:
                            obs.attempt(link, f.label)
                    except TimeoutError:
                        upstream_s += clock() - now
                        if cm.expired():
                            if obs is not None:
                                obs.attempt(link, "total_timeout")
                            trail.append((model.id, "total_timeout"))
                            return Outcome(None, errors.total_timeout(), link, attempts, reason, upstream_s, trail)
                        failure = UpstreamFailure(FailureKind.READ_TIMEOUT, "the upstream call timed out")
                        if obs is not None:
                            obs.attempt(link, failure.label)
                    except GatewayError as e:  # the request cannot be sent to this link at all
                        attempts -= 1
                        trail.append((model.id, e.code))
                        return Outcome(None, e, link, attempts, reason, upstream_s, trail)
                    except asyncio.CancelledError:
                        if obs is not None:
                            obs.attempt(link, "cancelled")
                        raise
                    else:
                        upstream_s += clock() - now
                        if obs is not None:
                            obs.attempt(link, "ok")
                        breakers.record_success(key, probe)
                        settled = True
                        trail.append((model.id, "ok"))
                        return Outcome(result, None, link, attempts, reason, upstream_s, trail)

                    assert failure is not None
                    if not failure.is_provider_fault:
                        # the provider answered (4xx, context length, content filter): not its fault
                        if probe:
                            breakers.record_success(key, True)
                        settled = True
                        break
                    if not failure.is_retryable:  # invalid body: charged, never retried or failed over
                        breakers.record_failure(key, probe, threshold, cooldown)
                        settled = True
                        trail.append((model.id, failure.label))
                        return Outcome(None, failure.to_gateway_error(), link, attempts, reason, upstream_s, trail)
                    if clock() >= deadline:
                        continue  # reported as total_timeout at the top of the loop
                    if tries >= max_tries:
                        break
                    if not self.budgets.try_spend_retry(
                        key, resilience.retry_budget_ratio, resilience.retry_budget_min_per_s
                    ):
                        note = ", retry budget spent"
                        break
                    delay = backoff_delay(
                        tries - 1,
                        resilience.backoff_base_ms / 1000.0,
                        resilience.backoff_max_ms / 1000.0,
                        failure.retry_after_s,
                        self.rand(),
                    )
                    if clock() + delay >= deadline:
                        note = ", next retry would pass the deadline"
                        break
                    await self.sleep(delay)
                if not settled:
                    breakers.record_failure(key, probe, threshold, cooldown)
                    settled = True
            finally:
                if not settled:  # cancelled or crashed: outcome unknown, free the probe slot
                    breakers.release(key, probe)

            last_failure = failure
            why = failure.fallback_reason or failure.label
            trail.append((model.id, why))
            if details is None:
                details = []
            details.append(f"{model.id}: {why} after {tries} {_plural(tries)}{note}")
            trigger = failure.fallback_trigger
            if trigger is None or trigger not in model.fallback_on:
                return Outcome(None, failure.to_gateway_error(), link, attempts, reason, upstream_s, trail)
            prev_model, reason = model.id, failure.fallback_reason

        # the chain is exhausted
        if last is None and chain:
            last = chain[0]
        if last_failure is None:
            if open_retry is not None:
                error = errors.circuit_open(open_model or "", open_retry)
            elif first_skip is not None:
                error = _skip_error(*first_skip)
            else:
                error = errors.upstream_unavailable("the chain has no model")
        elif involved == 1:
            error = last_failure.to_gateway_error()
        else:
            error = errors.upstream_unavailable("; ".join(details or ()))
        return Outcome(None, error, last, attempts, reason, upstream_s, trail)
