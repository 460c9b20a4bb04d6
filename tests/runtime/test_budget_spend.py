"""Budget accounts read from the usage records when first needed (docs/limits.md#durable), on the real
database: a budget added live starts from the spend already in its period, every process's records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from routing.core.budget_accounts import LOADED, NEW, Budgets, Exhausted, Unloaded
from routing.models import UsageRecord
from routing.runtime.shared_limits import load_accounts


def spend(org: str, cost: str, n: int = 1) -> None:
    for _ in range(n):
        UsageRecord.objects.create(
            request_id=uuid.uuid4().hex, created_at=datetime.now(UTC), endpoint="chat", org=org, agent="bot",
            status=200, cost=cost,
        )  # fmt: skip


@pytest.mark.django_db(transaction=True)
async def test_a_budget_added_live_starts_from_the_spend_already_in_its_period():
    org = f"l{uuid.uuid4().hex[:8]}"
    await _in_thread(spend, org, "0.5", 3)  # spent before the budget existed, by any process
    budgets = Budgets()
    budgets.loading = True  # a spend loader runs (the composition root's)
    with pytest.raises(Unloaded) as unloaded:  # the first request waits for the read, once
        budgets.admit(org, (2.0, "day"), "bot", None, 0.1)
    account = unloaded.value.accounts[0]
    assert account.state == NEW
    await load_accounts(budgets, [account], flush=None)
    assert (account.state, account.spend()) == (LOADED, 1.5)
    budgets.admit(org, (2.0, "day"), "bot", None, 0.4).settle(0.4)
    with pytest.raises(Exhausted):  # $1.9 spent: $0.2 does not fit in $2
        budgets.admit(org, (2.0, "day"), "bot", None, 0.2)

    # Read again (the 30 s pass): the records written since are in the sum, this process's own
    # settled spend is not counted twice.
    await _in_thread(spend, org, "0.4")  # the record of the request settled above
    await load_accounts(budgets, [account], flush=None)
    assert account.spend() == pytest.approx(1.9)


async def _in_thread(fn, *args):
    import asyncio

    await asyncio.get_running_loop().run_in_executor(None, fn, *args)
