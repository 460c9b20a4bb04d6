"""Retry budget (docs/resilience.md#r3): light traffic keeps its retries, a storm is capped."""

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


# --- found by mutation testing (make mutation): exact accounting of the sliding window


def test_the_window_counts_exactly_and_forgets_each_second_after_ten() -> None:
    clock = FakeClock(1000.0)
    b = RetryBudgets(clock=clock)
    assert b.stats(KEY) == (0, 0)
    for _ in range(5):
        b.record_request(KEY)
    assert b.try_spend_retry(KEY, 1.0, 0)
    assert b.stats(KEY) == (5, 1)
    clock.advance(1)
    for _ in range(3):
        b.record_request(KEY)
    assert b.stats(KEY) == (8, 1)
    clock.advance(8)  # 9 s after the first second: still inside the window
    assert b.stats(KEY) == (8, 1)
    clock.advance(1)  # the first second leaves
    assert b.stats(KEY) == (3, 0)
    clock.advance(1)
    assert b.stats(KEY) == (0, 0)
    clock.advance(0.5)  # within the same second nothing moves
    b.record_request(KEY)
    assert b.stats(KEY) == (1, 0)


def test_the_budget_is_exactly_ratio_times_requests_plus_the_floor() -> None:
    clock = FakeClock()
    b = RetryBudgets(clock=clock)
    for _ in range(4):
        b.record_request(KEY)
    # 0.5 * 4 + 0.1 * 10 = 3 retries, not one more
    assert [b.try_spend_retry(KEY, 0.5, 0.1) for _ in range(4)] == [True, True, True, False]
    assert b.stats(KEY) == (4, 3)


def test_a_window_left_alone_for_exactly_ten_seconds_starts_empty() -> None:
    clock = FakeClock(1000.0)
    b = RetryBudgets(clock=clock)
    for _ in range(7):
        b.record_request(KEY)
    clock.advance(10)
    assert b.stats(KEY) == (0, 0)
    b.record_request(KEY)
    clock.advance(25)
    b.record_request(KEY)
    assert b.stats(KEY) == (1, 0)


def test_retain_accepts_any_iterable_of_keys() -> None:
    b = RetryBudgets(clock=FakeClock())
    other = ("local-b", "chat-b")
    b.record_request(KEY)
    b.record_request(other)
    b.retain([other])
    assert b.stats(KEY) == (0, 0) and b.stats(other) == (1, 0)


def test_after_a_long_silence_the_window_slides_from_zero() -> None:
    clock = FakeClock(1000.0)
    b = RetryBudgets(clock=clock)
    for _ in range(7):
        b.record_request(KEY)
        b.try_spend_retry(KEY, 1.0, 1)
    clock.advance(30)
    b.record_request(KEY)
    assert b.try_spend_retry(KEY, 1.0, 1)
    clock.advance(5)  # the buckets emptied by the silence slide out: nothing is subtracted twice
    assert b.stats(KEY) == (1, 1)
