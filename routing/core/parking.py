"""Deployments parked while their provider says they are out of quota or credit (docs/errors.md#upstream).

An upstream that answered "insufficient quota" / "credit balance too low" / a daily quota
violation will answer the same until its reset: each call costs a round trip, a retry and
perhaps a bill. The link (or deployment) is therefore parked — skipped without an upstream
call, like an open breaker, and a fallback serves — until the reset time the provider gave,
else for the operator's `resilience.quota_park_s`. Then one request tries it again: a
quota-exhausted deployment costs at most one upstream call per park period.

Per process, in memory (a park is a provider's statement about an account, re-learned by
each process with one call). The request path pays a dict lookup only while something is
parked. One log line and the `switchboard_parked{provider,model}` gauge per park and unpark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("switchboard.resilience")


class Parking:
    """Parked links by breaker key (provider, model[, org]): until when, on the `clock`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # (key, "PARKED" | "MISCONFIGURED", 1 | 0) on every change: the composition root points it at the
        # metrics (gateway_project.process); core imports nothing above it
        self.observe: Callable[[Any, str, int], None] | None = None
        self.until: dict[Any, float] = {}
        self.misconfigured: dict[Any, str] = {}  # links whose provider refused the credentials, until one serves

    def misconfigure(self, key: Any, why: str) -> None:
        """The provider refused `key`'s credentials: shown until a call through it succeeds (one log line)."""
        if key not in self.misconfigured:
            log.error("%s/%s is misconfigured: %s", key[0], key[1], why)
            self._gauge(key, 1, "MISCONFIGURED")
        self.misconfigured[key] = why

    def served(self, key: Any) -> None:
        """A call through `key` succeeded: its credentials work again."""
        if self.misconfigured.pop(key, None) is not None:
            log.info("%s/%s serves again: no longer misconfigured", key[0], key[1])
            self._gauge(key, 0, "MISCONFIGURED")

    def park(self, key: Any, seconds: float, why: str) -> None:
        """Skip `key` for `seconds` (a park in force is extended, never shortened)."""
        until = self.clock() + max(seconds, 0.0)
        known = self.until.get(key)
        if known is not None and known >= until:
            return
        self.until[key] = until
        if known is None:
            log.warning("parked %s/%s for %.0f s: %s", key[0], key[1], seconds, why)
            self._gauge(key, 1)

    def parked_s(self, key: Any) -> float | None:
        """Seconds `key` stays parked, or None (a park that ran out is lifted here)."""
        until = self.until.get(key)
        if until is None:
            return None
        left = until - self.clock()
        if left > 0:
            return left
        del self.until[key]
        log.info("unparked %s/%s: its park period is over, the next request tries it", key[0], key[1])
        self._gauge(key, 0)
        return None

    def left_s(self, key: Any) -> float:
        """Seconds `key` stays parked (0: not parked), without lifting anything: for the dashboard."""
        until = self.until.get(key)
        return max(until - self.clock(), 0.0) if until is not None else 0.0

    def _gauge(self, key: Any, value: int, name: str = "PARKED") -> None:
        if self.observe is not None:
            try:
                self.observe(key, name, value)
            except Exception:  # noqa: BLE001 - a metric never breaks the request path
                log.exception("parking observer failed")

    def snapshot(self) -> list[tuple[Any, float]]:
        """(key, seconds left) of every parked link, for the dashboard."""
        now = self.clock()
        return [(key, until - now) for key, until in self.until.items() if until > now]
