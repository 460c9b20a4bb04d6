"""Hedged first tokens: the p95 delay and the budget (docs/overload.md#hedging)."""

from __future__ import annotations

from routing.core.hedging import MIN_SAMPLES, Hedges, HedgeSettings
from tests.core.fakes import FakeClock


def hedges(pct: float = 5.0) -> tuple[Hedges, FakeClock]:
    clock = FakeClock()
    h = Hedges(clock)
    h.configure({"m": HedgeSettings(budget_pct=pct)})
    return h, clock


def test_no_hedge_before_the_p95_is_known_nor_for_a_model_not_hedged() -> None:
    h, _ = hedges()
    for _ in range(MIN_SAMPLES - 1):
        h.observe("k", 0.05)
    assert h.delay("m", "k") is None
    h.observe("k", 0.05)
    assert h.delay("m", "k") == 0.05
    assert h.delay("other", "k") is None


def test_the_delay_is_the_recent_p95_of_first_tokens() -> None:
    h, _ = hedges()
    for i in range(100):
        h.observe("k", 2.0 if i % 50 == 0 else 0.05)  # 2 % at 2 s
    assert h.delay("m", "k") == 0.05
    for _ in range(100):
        h.observe("k", 0.3)
    assert h.delay("m", "k") == 0.3


def test_hedges_stay_within_the_budget_of_extra_calls_per_window() -> None:
    h, clock = hedges(pct=5.0)
    outcomes: list[str] = []
    h.on_outcome = outcomes.append
    granted = 0
    for _ in range(1000):  # every request late: each asks for a hedge
        h.delay("m", "k")
        granted += h.spend("m")
        clock.advance(0.005)  # 1000 requests over 5 s: one window
    assert 45 <= granted <= 50  # 5 % of the window's requests, never more
    assert outcomes.count("budget_spent") == 1000 - granted
    assert h.spend("m") is False
    clock.advance(20)  # a new window: the budget is back
    for _ in range(40):
        h.delay("m", "k")
    assert h.spend("m") is True
