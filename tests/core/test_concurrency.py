"""The adaptive concurrency limit (docs/overload.md#adaptive-concurrency): AIMD on 429s, timeouts and latency."""

from __future__ import annotations

from routing.core.concurrency import HOLD_S, AdaptiveLimit, LimitSettings


def test_the_limit_grows_while_latency_stays_near_its_baseline_and_the_limit_is_used() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=10, max_limit=100))
    now = 0.0
    for _ in range(200):
        now += 0.1
        lim.sample(0.1, inflight=lim.limit, now=now)
    assert lim.limit > 20  # about +1 per limit's worth of calls


def test_an_unused_limit_does_not_grow() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=10))
    for i in range(500):
        lim.sample(0.1, inflight=2, now=i * 0.1)
    assert lim.limit == 10


def test_each_refusal_takes_one_off_the_limit_so_a_halved_capacity_is_followed_at_once() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=20))
    lim.sample(0.1, inflight=1, now=0.0)
    for _ in range(10):  # capacity 20 -> 10: ten of the twenty calls in flight are refused
        lim.dropped(now=1.0)
    assert lim.limit == 10


def test_refusals_never_take_more_than_half_the_limit_per_round_trip() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=100))
    lim.sample(0.2, inflight=1, now=0.0)
    for _ in range(80):  # a storm of 429s within one round-trip
        lim.dropped(now=1.0)
    assert lim.limit == 50
    for _ in range(80):  # a round-trip later: again at most half
        lim.dropped(now=1.0 + lim.recent + 0.01)
    assert lim.limit == 25


def test_rising_latency_cuts_the_limit_and_it_recovers_after() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=40, backoff=0.8))
    now = 0.0
    for _ in range(50):
        now += 0.1
        lim.sample(0.1, inflight=lim.limit, now=now)
    before = lim.limit
    for _ in range(20):  # the upstream slows down 5x: congestion
        now += 0.6
        lim.sample(0.5, inflight=lim.limit, now=now)
    slowed = lim.limit
    assert slowed < before / 2
    for _ in range(300):
        now += 0.1
        lim.sample(0.1, inflight=lim.limit, now=now)
    assert lim.limit > slowed


def test_the_limit_stays_within_its_bounds() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=5, min_limit=3, max_limit=8, backoff=0.1))
    for i in range(10):
        lim.dropped(now=float(i))
    assert lim.limit == 3
    for i in range(1000):
        lim.sample(0.1, inflight=100, now=10.0 + i)
    assert lim.limit == 8


def test_after_a_refusal_the_limit_holds_then_finds_a_returned_capacity_within_two_seconds() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=20, max_limit=100))
    now = 0.0
    lim.sample(0.1, inflight=20, now=now)
    for _ in range(10):
        lim.dropped(now=now)  # the capacity halved: 10 refusals
    assert lim.limit == 10

    def serve(seconds: float) -> None:
        nonlocal now
        end = now + seconds
        while now < end:  # limit-many calls answer every 100 ms round-trip
            now += 0.1
            for _ in range(lim.limit):
                lim.sample(0.1, inflight=lim.limit, now=now)

    serve(HOLD_S - 0.15)
    assert lim.limit == 10  # held: probing above a hard capacity costs one refusal per hold
    serve(1.0)  # the capacity is back: found by doubling steps
    assert lim.limit >= 18
