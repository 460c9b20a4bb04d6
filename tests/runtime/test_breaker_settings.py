"""The breakers take the operator's threshold and cooldown from each configuration swapped in
(docs/resilience.md#r5): no request passes them, and a reload changes them for every link."""

from __future__ import annotations

from dataclasses import replace

from routing.config import live
from routing.core.breaker import BreakerKey, State


def test_a_configuration_swap_gives_the_breakers_their_threshold_and_cooldown(process) -> None:
    before = live.current()
    key = BreakerKey("swap-provider", "swap-model")
    strict = replace(before.resilience, breaker_failure_threshold=1, breaker_cooldown_s=7.0)
    live.swap(replace(before, resilience=strict))
    try:
        assert (process.breakers.threshold, process.breakers.cooldown_s) == (1, 7.0)
        process.breakers.record_failure(key, 0)  # one failure: the new threshold opens the link
        assert process.breakers.state(key) is State.OPEN
        refused = process.breakers.admit(key)
        assert not refused.allowed and 6.5 < refused.retry_after_s <= 7.0
    finally:
        process.breakers.reset(key)
        live.swap(before)
    res = before.resilience
    assert (process.breakers.threshold, process.breakers.cooldown_s) == (
        res.breaker_failure_threshold,
        res.breaker_cooldown_s,
    )
