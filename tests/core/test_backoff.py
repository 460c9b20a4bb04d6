"""Backoff bounds (docs/resilience.md#r3): exact, with fixed random fractions."""

from __future__ import annotations

import pytest

from routing.core.backoff import backoff_delay


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [(0, 0.1, 0.2), (1, 0.2, 0.4), (2, 0.4, 0.8), (5, 2.5, 5.0), (6, 2.5, 5.0), (40, 2.5, 5.0), (5000, 2.5, 5.0)],
)
def test_equal_jitter_stays_within_half_to_full_exponential(attempt: int, low: float, high: float) -> None:
    assert backoff_delay(attempt, 0.2, 5.0, None, 0.0) == pytest.approx(low)
    assert backoff_delay(attempt, 0.2, 5.0, None, 1.0) == pytest.approx(high)
    mid = backoff_delay(attempt, 0.2, 5.0, None, 0.5)
    assert low < mid < high


def test_default_base_first_retry_waits_50_to_100_ms() -> None:
    assert backoff_delay(0, 0.1, 5.0, None, 0.0) == pytest.approx(0.05)
    assert backoff_delay(0, 0.1, 5.0, None, 0.999) == pytest.approx(0.09995)


def test_longer_retry_after_wins() -> None:
    assert backoff_delay(0, 0.2, 5.0, 3.0, 0.7) == 3.0
    # just above the jittered backoff (attempt 1: 0.2 + 0.7 * 0.2 = 0.34 s) it still wins
    assert backoff_delay(1, 0.2, 5.0, 0.35, 0.7) == 0.35
    assert backoff_delay(1, 0.2, 5.0, 0.33, 0.7) == pytest.approx(0.34)


def test_short_retry_after_never_shrinks_backoff() -> None:
    # attempt 2 with base 200 ms: e = 800 ms, full jitter draw gives 800 ms
    assert backoff_delay(2, 0.2, 5.0, 0.001, 1.0) == pytest.approx(0.8)


def test_retry_after_beyond_cap_is_honoured() -> None:
    assert backoff_delay(3, 0.1, 5.0, 30.0, 1.0) == 30.0
