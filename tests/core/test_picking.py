"""Deployment selection strategies with injected randomness and clock (docs/deployments.md#strategies)."""

from __future__ import annotations

import random
from collections import Counter

from routing.core.picking import EXPLORE, Picker, pick_weighted
from tests.core.deployments_fakes import multi
from tests.core.fakes import FakeClock


def _names(link):
    return {t.name: t for t in link.deployments}


def test_weighted_converges_to_the_weights_over_many_seeded_draws() -> None:
    lk = multi("chat", ("east", "west", "north"), weights=(3, 1, 6))
    bal = Picker(clock=FakeClock())
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        counts = Counter(bal.pick("weighted", lk.deployments, rng.random).name for _ in range(20000))
        # expected 6000 / 2000 / 12000: within 3 % of the draws (about 7 standard deviations)
        assert abs(counts["east"] - 6000) < 600
        assert abs(counts["west"] - 2000) < 600
        assert abs(counts["north"] - 12000) < 600


def test_weighted_interval_edges() -> None:
    lk = multi("chat", ("east", "west"), weights=(3, 1))
    east, west = lk.deployments
    assert pick_weighted(lk.deployments, 0.0) is east
    assert pick_weighted(lk.deployments, 0.749) is east
    assert pick_weighted(lk.deployments, 0.75) is west
    assert pick_weighted(lk.deployments, 0.9999) is west


def test_least_busy_picks_the_one_with_fewest_in_flight() -> None:
    lk = multi("chat", ("east", "west", "north"))
    d = _names(lk)
    bal = Picker(clock=FakeClock())
    for _ in range(3):
        bal.started(d["east"].key)
    bal.started(d["west"].key)
    bal.started(d["north"].key)
    bal.started(d["north"].key)
    rng = random.Random(7)
    assert {bal.pick("least_busy", lk.deployments, rng.random).name for _ in range(50)} == {"west"}
    bal.finished(d["east"].key)
    bal.finished(d["east"].key)
    bal.finished(d["east"].key)
    assert bal.pick("least_busy", lk.deployments, rng.random).name == "east"


def test_least_busy_breaks_ties_at_random() -> None:
    lk = multi("chat", ("east", "west"))
    bal = Picker(clock=FakeClock())
    rng = random.Random(3)
    counts = Counter(bal.pick("least_busy", lk.deployments, rng.random).name for _ in range(2000))
    assert counts["east"] > 800 and counts["west"] > 800


def test_latency_follows_an_injected_change_and_still_explores() -> None:
    lk = multi("chat", ("east", "west"))
    d = _names(lk)
    bal = Picker(clock=FakeClock())
    rng = random.Random(11)
    for _ in range(10):
        bal.observe(d["east"].key, 0.050)
        bal.observe(d["west"].key, 0.400)
    counts = Counter(bal.pick("latency", lk.deployments, rng.random).name for _ in range(4000))
    # the slow one gets only the exploration share (half of EXPLORE: a random pick of two)
    assert counts["west"] < 4000 * EXPLORE
    assert counts["west"] > 4000 * EXPLORE / 4  # ...but never nothing: its figure stays fresh
    for _ in range(20):  # east becomes slow, west fast
        bal.observe(d["east"].key, 0.900)
        bal.observe(d["west"].key, 0.030)
    counts = Counter(bal.pick("latency", lk.deployments, rng.random).name for _ in range(4000))
    assert counts["east"] < 4000 * EXPLORE
    assert counts["west"] > 4000 * (1 - EXPLORE)


def test_latency_power_of_two_among_four_prefers_fast_ones() -> None:
    lk = multi("chat", ("a", "b", "c", "d"))
    bal = Picker(clock=FakeClock())
    for t, secs in zip(lk.deployments, (0.1, 0.2, 0.3, 0.4), strict=True):
        bal.observe(t.key, secs)
    rng = random.Random(5)
    counts = Counter(bal.pick("latency", lk.deployments, rng.random).name for _ in range(8000))
    assert counts["a"] > counts["b"] > counts["c"] > counts["d"] > 0


def test_rpm_capacity_fills_and_refills_with_the_clock() -> None:
    clock = FakeClock()
    lk = multi("chat", ("east",), rpm={"east": 5})
    (east,) = lk.deployments
    bal = Picker(clock=clock)
    for _ in range(5):
        assert bal.room_s(east, 0) == 0
        bal.take(east, 0)
    wait = bal.room_s(east, 0)
    assert 11.9 < wait <= 12.0  # one request refills in 60 / 5 s
    clock.advance(12.0)
    assert bal.room_s(east, 0) == 0


def test_tpm_capacity_counts_the_token_estimate() -> None:
    clock = FakeClock()
    lk = multi("chat", ("east",), tpm={"east": 1000})
    (east,) = lk.deployments
    bal = Picker(clock=clock)
    assert bal.room_s(east, 800) == 0
    bal.take(east, 800)
    assert bal.room_s(east, 100) == 0
    assert bal.room_s(east, 300) > 0  # 200 left


def test_capacity_boundaries_a_last_request_fits_exactly_and_a_short_wait_is_still_a_wait() -> None:
    """Found by mutation testing (room_s): a request without a token estimate and a wait under a second.

    (`< 1.0` against `<= 1.0` at a level of exactly 1 is equivalent: the wait it computes is 0.)
    """
    clock = FakeClock()
    lk = multi("chat", ("one", "tok", "fast"), rpm={"one": 1, "fast": 120}, tpm={"tok": 1000})
    one, tok, fast = lk.deployments
    bal = Picker(clock=clock)
    assert bal.room_s(one, 0) == 0  # exactly one request of room: it fits
    bal.take(one, 0)
    assert bal.room_s(one, 0) > 0
    assert bal.room_s(tok, 800) == 0  # as the executor does: asked, then taken
    bal.take(tok, 800)
    assert bal.room_s(tok, 200) == 0  # exactly the 200 tokens left: fits
    bal.take(tok, 200)
    assert bal.room_s(tok, 0) == 0  # no token estimate: never waits for the tpm
    for _ in range(120):
        assert bal.room_s(fast, 0) == 0
        bal.take(fast, 0)
    assert 0 < bal.room_s(fast, 0) <= 0.5  # 120 rpm refills one in 0.5 s: a wait under a second is a wait
