"""One model's deployments as one request tries them (docs/deployments.md#retry-and-fallback).

A `Spread` is the request's bookkeeping over the model's deployments: those not tried yet,
the model's calls left, and what stopped the others (an open breaker, capacity, a park), so
that when none served the walk can say why.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.core.parking import Parking
from routing.core.picking import Target
from routing.core.walk import Walk, parked


class Spread:
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


def none_served(parking: Parking, spread: Spread, model_id: str, walk: Walk) -> str | None:
    """Why no deployment served: None (tried and failed, or all parked: `walk.last_failure`),
    "capacity" or "circuit_open" (nothing could be tried)."""
    if spread.failed:
        return None
    if spread.parked is not None and spread.full_wait is None and spread.open_wait is None:
        if parked(parking, spread.parked.key, model_id, walk):
            return None  # every deployment left is parked: the fallback rule of a quota failure applies
    if spread.full_wait is not None:
        walk.found_full(model_id, spread.full_wait)
        return "capacity"
    walk.found_open(model_id, spread.open_wait or 0.0)
    return "circuit_open"
