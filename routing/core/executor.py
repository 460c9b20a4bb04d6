"""The one generic executor: it walks a resolved fallback chain (docs/resilience.md).

It knows nothing about chat, embeddings or rerank: it walks a chain of `Link`s and
calls `attempt(link, deadline)` for each upstream try. `attempt` returns a result or
raises `UpstreamFailure` (classified in routing.core.failures, the single source of
truth for retry, fallback and breaker decisions).

This module is the walk itself: skip what preflight or policy ruled out, ask the
breaker or the quota park, serve the link, and on failure decide by the model's
`fallback_on` whether to move on. Each concern a link's service needs lives in a module
of its own, all reading the executor's parts (routing.core.parts):

- routing.core.link_tries: one link's calls with retries and backoff, its breaker charged once;
- routing.core.deployment_tries: a model's deployments, one picked per try;
- routing.core.capacity_leases: which deployments have room, and the wait for a lease round;
- routing.core.hedge_race: a late first token raced against another deployment;
- routing.core.overload_gate: a call within a deployment's adaptive concurrency limit;
- routing.core.walk and routing.core.settlement: the request's bookkeeping and its Outcome.

One logical request charges each link's breaker once: one success, or one failure
after that link's retries. Clock, sleep and randomness are injected so tests run in
simulated time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from routing.core import errors
from routing.core.admission_queue import PriorityTicket
from routing.core.deployment_tries import try_deployments
from routing.core.failures import FailureKind
from routing.core.link_tries import try_link
from routing.core.parts import ExecutorParts
from routing.core.resilience import Resilience
from routing.core.settlement import Settlement
from routing.core.walk import Link, Observer, Outcome, Walk, parked, window

__all__ = ["Executor", "Link", "Observer", "Outcome", "Settlement"]

T = TypeVar("T")


class Executor(ExecutorParts):
    """Runs one logical request over a fallback chain, with the parts it was built with."""

    async def run(
        self,
        chain: Sequence[Link],
        attempt: Callable[[Link, float], Awaitable[T]],
        resilience: Resilience,
        deadline: float,
        settle_later: bool = False,
        tokens: int = 0,
        priority: PriorityTicket | None = None,
    ) -> Outcome:
        """Serve the request from the first link that can; `deadline` is on this executor's clock.

        With `settle_later` the serving link's breaker is not charged when `attempt`
        returns: the Outcome carries a `Settlement` the caller must settle (streams, whose
        success is a clean end, not the commit). `tokens` is the request's estimate,
        counted against deployments' `tpm` capacity. `priority` is the request's ticket for the
        deployments' queues and hedging (None: the default class, never hedged); its `discard` closes a
        result that lost a hedge race (an open stream): without it, streams are never hedged.
        """
        obs = self.observer
        walk = Walk(attempt, resilience, deadline, settle_later, tokens, priority)
        for link in chain:
            model = link.model
            skip = link.skip_reason
            if skip is None and walk.too_long is not None and window(model) <= walk.too_long:
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

    async def _serve_link(self, link: Link, walk: Walk) -> Outcome | None:
        """A model served by its one provider: the request's Outcome, or None to go on down the chain."""
        model = link.model
        if self.parking.until and parked(self.parking, link.breaker_key, model.id, walk):  # docs/errors.md#upstream
            failure = walk.last_failure
            assert failure is not None
            if "rate_limited" not in model.fallback_on:
                return walk.fail(failure.to_gateway_error(), link)
            walk.leave(model.id, failure.fallback_reason)
            return None
        adm = self.breakers.admit(link.breaker_key, link.org)
        if not adm.allowed:
            walk.found_open(model.id, adm.retry_after_s)
            if "circuit_open" not in model.fallback_on:
                return walk.fail(errors.circuit_open(model.id, adm.retry_after_s), link)
            walk.explain(f"{model.id}: circuit_open")
            walk.leave(model.id, "circuit_open")
            return None
        ended = await try_link(self, link, adm.probe, walk)
        return ended if ended is not None else move_on(link, walk)

    async def _serve_deployments(self, link: Link, walk: Walk) -> Outcome | None:
        """A model with deployments: the request's Outcome, or None to go on down the chain."""
        ended, why = await try_deployments(self, link, walk)
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
        return move_on(link, walk)


def move_on(link: Link, walk: Walk) -> Outcome | None:
    """After the link failed: the request's Outcome unless the model's `fallback_on` lets it move on."""
    model = link.model
    failure = walk.last_failure
    assert failure is not None
    trigger = failure.fallback_trigger
    if trigger is None or trigger not in model.fallback_on:
        return walk.fail(failure.to_gateway_error(), walk.last)
    if failure.kind is FailureKind.CONTEXT_LENGTH:
        walk.too_long = max(walk.too_long or 0, window(model, 0))
    walk.leave(model.id, failure.fallback_reason)
    return None
