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


def test_a_probe_refusal_takes_one_off_but_more_than_a_probe_explains_halves_the_limit_at_once() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=20))
    lim.sample(0.1, inflight=1, now=0.0)
    lim.dropped(now=1.0)  # a probe one call past the capacity
    assert lim.limit == 19
    lim.dropped(now=1.05)  # a probe grows by 1 at a time: a second in the round-trip may still be one
    assert lim.limit == 18
    lim.dropped(now=1.06)  # a third: the capacity itself fell (20 -> 10)
    assert lim.limit == 10  # followed at once: not one more refused call per step down
    for _ in range(8):  # the calls already admitted above it, refused too
        lim.dropped(now=1.08)
    assert lim.limit == 10
    lim.dropped(now=3.0)  # a round-trip later: a lone probe refusal again
    assert lim.limit == 9


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


def test_past_its_last_refusal_the_limit_grows_only_when_full_and_one_call_at_a_time() -> None:
    lim = AdaptiveLimit(LimitSettings(initial=20, max_limit=100))
    now = 0.0
    lim.sample(0.1, inflight=20, now=now)
    lim.dropped(now=now)  # refused at 20: the capacity is about 19

    def serve(seconds: float, busy: int) -> list[int]:  # limit-many calls answer every 100 ms round-trip
        nonlocal now
        seen = [lim.limit]
        end = now + seconds
        while now < end:
            now += 0.1
            for _ in range(lim.limit):
                lim.sample(0.1, inflight=min(busy, lim.limit), now=now)
            seen.append(lim.limit)
        return seen

    assert max(serve(HOLD_S + 3.0, busy=17)) == 19  # busy but never full: nothing tests a higher limit
    seen = serve(2.0, busy=1000)  # full: probes, one call at a time up to just past the last refusal
    steps = [b - a for a, b in zip(seen, seen[1:], strict=False) if b != a]
    assert steps[:2] == [1, 1] and max(steps) > 1  # then faster again (a capacity that came back)
