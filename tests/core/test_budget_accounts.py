"""Spend budgets by reservation, with an injected wall clock (docs/limits.md#budgets)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from routing.core.budget_accounts import Budgets, Exhausted, period_bounds, request_cost


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(ts(2026, 12, 1, 12, 0))


DAY5 = (5.0, "day")


def test_periods_are_utc_calendar_days_and_months_and_total_never_ends():
    assert period_bounds("day", ts(2026, 12, 1, 23, 59)) == (ts(2026, 12, 1), ts(2026, 12, 2))
    assert period_bounds("month", ts(2026, 12, 31, 12)) == (ts(2026, 12, 1), ts(2027, 1, 1))
    assert period_bounds("month", ts(2026, 2, 10)) == (ts(2026, 2, 1), ts(2026, 3, 1))
    assert period_bounds("total", ts(2026, 2, 10)) == (0.0, None)


def test_request_cost_is_per_million_tokens_and_a_missing_price_costs_nothing():
    assert request_cost(2.0, 8.0, 1000, 500) == pytest.approx(0.002 + 0.004)
    assert request_cost(None, 8.0, 1000, 500) == pytest.approx(0.004)
    assert request_cost(None, None, 10**6, 10**6) == 0.0


def test_concurrent_reservations_never_overshoot_and_a_refusal_reserves_nothing(clock):
    budgets = Budgets(clock)
    holds = [budgets.admit("acme", None, "bot", DAY5, 2.0) for _ in range(2)]
    with pytest.raises(Exhausted) as refused:
        budgets.admit("acme", None, "bot", DAY5, 2.0)  # 4 reserved, 1 left
    assert refused.value.scope == "agent"
    assert refused.value.resets_in_s == pytest.approx(12 * 3600)
    account = budgets.find(("agent", "acme", "bot"))
    assert account.reserved == pytest.approx(4.0) and account.left() == pytest.approx(1.0)
    holds[0].settle(0.5)  # the real cost replaces the worst case
    assert account.spend() == pytest.approx(0.5) and account.left() == pytest.approx(2.5)
    holds[1].release()  # no answer: nothing spent
    assert account.spend() == pytest.approx(0.5) and account.left() == pytest.approx(4.5)
    holds[1].settle(3.0)  # settling twice changes nothing
    assert account.left() == pytest.approx(4.5)


def test_an_answer_without_usage_keeps_its_reservation(clock):
    budgets = Budgets(clock)
    budgets.admit("acme", None, "bot", DAY5, 1.5).settle(None)
    assert budgets.find(("agent", "acme", "bot")).spend() == pytest.approx(1.5)


def test_the_org_budget_applies_to_all_its_agents_and_either_refuses(clock):
    budgets = Budgets(clock)
    org = (3.0, "month")
    budgets.admit("acme", org, "a", None, 2.0).settle(2.0)
    with pytest.raises(Exhausted) as refused:
        budgets.admit("acme", org, "b", DAY5, 2.0)
    assert refused.value.scope == "org"
    assert refused.value.resets_in_s == pytest.approx(ts(2027, 1, 1) - clock.now)
    # The agent's account was not touched by the refused request.
    assert budgets.find(("agent", "acme", "b")).left() == pytest.approx(5.0)


def test_a_new_period_starts_from_zero_and_total_never_resets(clock):
    budgets = Budgets(clock)
    budgets.admit("acme", None, "bot", DAY5, 4.0).settle(4.0)
    budgets.admit("acme", (4.0, "total"), "other", None, 4.0).settle(4.0)
    with pytest.raises(Exhausted):
        budgets.admit("acme", None, "bot", DAY5, 2.0)
    clock.now = ts(2026, 12, 2, 0, 0, 1)
    budgets.admit("acme", None, "bot", DAY5, 2.0)
    with pytest.raises(Exhausted) as refused:
        budgets.admit("acme", (4.0, "total"), "other", None, 0.01)
    assert refused.value.resets_in_s is None


def test_spend_loaded_from_the_usage_records_counts_toward_its_period(clock):
    budgets = Budgets(clock)
    start = budgets.period_starts(["day"])["day"]
    budgets.admit("acme", None, "bot", DAY5, 1.0)  # an account created before the load gets its base too
    budgets.load({(("agent", "acme", "bot"), start): 3.5, (("agent", "acme", "bot"), 0.0): 99.0})
    account = budgets.find(("agent", "acme", "bot"))
    assert account.spend() == pytest.approx(3.5)
    assert account.left() == pytest.approx(0.5)  # 5 - 3.5 spent - 1 reserved
    clock.now = ts(2026, 12, 2, 1)  # the next day: records before boot are all from an earlier day
    assert budgets.admit("acme", None, "bot", DAY5, 4.0).amount == 4.0


def test_a_changed_amount_applies_from_the_next_request(clock):
    budgets = Budgets(clock)
    budgets.admit("acme", None, "bot", DAY5, 3.0).settle(3.0)
    with pytest.raises(Exhausted):
        budgets.admit("acme", None, "bot", (2.0, "day"), 0.1)
    budgets.admit("acme", None, "bot", (10.0, "day"), 6.0)  # spend kept, new amount


def test_shared_mode_reserves_from_the_lease_and_owes_what_it_overspent(clock):
    budgets = Budgets(clock)
    budgets.shared = True
    starved = []
    budgets.starved = starved.append
    with pytest.raises(Exhausted):
        budgets.admit("acme", None, "bot", DAY5, 1.0)  # no lease yet
    account = budgets.find(("agent", "acme", "bot"))
    assert starved == [account] and account.need == 1.0
    account.lease = 1.5  # what the syncer leased from the cluster counter
    hold = budgets.admit("acme", None, "bot", DAY5, 1.0)
    assert account.lease == pytest.approx(0.5) and account.reserved == pytest.approx(1.0)
    hold.settle(1.8)  # the estimate was short by 0.8: the lease covers 0.5, 0.3 is owed
    assert account.lease == 0.0
    assert account.owed == pytest.approx(0.3)
    assert account.reserved == 0.0 and account.spent == pytest.approx(1.8)


def test_a_period_begins_at_its_first_second_exactly_and_a_new_one_drops_the_old_lease():
    """Found by mutation testing (period_bounds, Account.roll): the edges of a period."""
    from routing.core.budget_accounts import Account

    assert period_bounds("day", ts(2026, 12, 2)) == (ts(2026, 12, 2), ts(2026, 12, 3))  # midnight is the new day
    assert period_bounds("month", ts(2027, 1, 1)) == (ts(2027, 1, 1), ts(2027, 2, 1))
    assert period_bounds("month", ts(2026, 12, 31, 23, 59, 59)) == (ts(2026, 12, 1), ts(2027, 1, 1))
    bases: list[tuple[tuple[str, ...], float]] = []

    def base(key: tuple[str, ...], start: float) -> float:
        bases.append((key, start))
        return 0.5  # what the usage records say was spent in the new period already

    acct = Account(("acme",), 5.0, "day", ts(2026, 12, 1, 12), base=0.0)
    acct.spent, acct.lease, acct.owed, acct.cluster = 3.0, 1.0, 0.25, 4.0  # shared mode, mid-day
    acct.roll(5.0, "day", ts(2026, 12, 2) - 0.001, base)
    assert acct.spent == 3.0 and bases == []  # the last millisecond of the day: the same period
    acct.roll(5.0, "day", ts(2026, 12, 2), base)
    assert (acct.start, acct.end) == (ts(2026, 12, 2), ts(2026, 12, 3))
    assert bases == [(("acme",), ts(2026, 12, 2))] and acct.base == 0.5 and acct.spent == 0.0
    assert (acct.lease, acct.owed, acct.cluster) == (0.0, 0.0, None)  # the old counter's lease and debt are gone
