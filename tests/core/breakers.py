"""Breaker settings in tests.

A registry takes its threshold and cooldown from each configuration snapshot swapped in (the
composition root calls `BreakerRegistry.configure`); a test sets them the same way, for good
(`configured`) or for a few lines on a registry other tests share (`breaker_settings`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from routing.core.breaker import BreakerRegistry
from routing.core.resilience import Resilience


def configured(registry: BreakerRegistry, threshold: int, cooldown_s: float) -> BreakerRegistry:
    """`registry`, now opening after `threshold` failures for `cooldown_s`."""
    registry.configure(Resilience(breaker_failure_threshold=threshold, breaker_cooldown_s=cooldown_s))
    return registry


@contextmanager
def breaker_settings(registry: BreakerRegistry, threshold: int, cooldown_s: float) -> Iterator[BreakerRegistry]:
    """These settings inside the block, the registry's own again after it."""
    before = registry.threshold, registry.cooldown_s
    configured(registry, threshold, cooldown_s)
    try:
        yield registry
    finally:
        configured(registry, *before)
