"""Retry budget (CONTRACT R3): light traffic keeps its retries, a storm is capped."""

from __future__ import annotations

from routing.core.retry_budget import RetryBudgets
from tests.core.fakes import FakeClock

KEY = ("local-a", "chat-a")


def test_light_traffic_keeps_every_retry() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    granted = 0
    for _ in range(100):  # 5 requests a second for 20 s, each wanting 2 retries (10 retries/s)
        b.record_request(KEY)
        granted += b.try_spend_retry(KEY, 0.2, 10) + b.try_spend_retry(KEY, 0.2, 10)
        clock.advance(0.2)
    assert granted == 200


def test_storm_is_capped_near_ratio_times_requests_plus_floor() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    granted = 0
    for _ in range(10):  # 1000 requests in one second, each wanting 2 retries
        for _ in range(100):
            b.record_request(KEY)
            granted += b.try_spend_retry(KEY, 0.2, 10) + b.try_spend_retry(KEY, 0.2, 10)
        clock.advance(0.1)
    assert 0.2 * 1000 + 100 - 2 <= granted <= 0.2 * 1000 + 100 + 1


def test_sustained_storm_stays_capped_per_window() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    granted = 0
    for _ in range(30):  # 30 s at 200 req/s, every request wanting a retry
        for _ in range(200):
            b.record_request(KEY)
            granted += b.try_spend_retry(KEY, 0.2, 1)
        clock.advance(1)
    requests, retries = b.stats(KEY)
    # at most ratio * requests + floor in any 10 s window: over 30 s about three windows' worth
    assert granted <= 3 * (0.2 * 2000 + 10) + 10
    assert retries <= 0.2 * 2000 + 10 + 1


def test_budget_recovers_after_the_window_slides() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    while b.try_spend_retry(KEY, 0.0, 1):
        pass
    assert not b.try_spend_retry(KEY, 0.0, 1)
    clock.advance(5)
    assert not b.try_spend_retry(KEY, 0.0, 1)
    clock.advance(5)
    assert b.try_spend_retry(KEY, 0.0, 1)
    clock.advance(100)
    assert b.stats(KEY) == (0, 0)


def test_links_have_separate_budgets() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    while b.try_spend_retry(KEY, 0.0, 1):
        pass
    assert b.try_spend_retry(("local-b", "chat-b"), 0.0, 1)
    b.retain({("local-b", "chat-b")})
    assert b.stats(KEY) == (0, 0)
