"""Budget accounts read from the usage records when first needed (docs/limits.md#durable), on the real
database: a budget added live starts from the spend already in its period, every process's records."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from routing.core.budget_accounts import LOADED, NEW, Budgets, Exhausted, Unloaded
from routing.models import UsageRecord
from routing.runtime.cluster.shared_limits import load_accounts


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


@pytest.mark.django_db(transaction=True)
def test_the_spend_of_a_period_is_summed_per_agent_org_and_key_from_its_start_up_to_until():
    """query_spend, the cluster's truth a reseed and a new account read (found by mutation testing: its
    filters, its grouping and the three keys each row counts for were unchecked outside the e2e tests)."""
    from routing.runtime.cluster.shared_limits import query_spend

    org, other = f"q{uuid.uuid4().hex[:8]}", f"q{uuid.uuid4().hex[:8]}"
    start = 1_780_000_000.0

    def row(org_: str, agent: str, prefix: str, cost: str | None, at: float) -> None:
        UsageRecord.objects.create(
            request_id=uuid.uuid4().hex, created_at=datetime.fromtimestamp(at, UTC), endpoint="chat",
            org=org_, agent=agent, key_prefix=prefix, status=200, cost=cost,
        )  # fmt: skip

    row(org, "bot", "sk-a", "0.10", start + 10)
    row(org, "bot", "sk-a", "0.20", start + 20)
    row(org, "ops", "sk-b", "0.05", start + 30)
    row(org, "ops", "sk-b", None, start + 31)  # no cost (an error before any token): counts nothing
    row(org, "bot", "sk-a", "1.00", start - 5)  # the period before
    row(other, "bot", "sk-c", "0.70", start + 10)

    import concurrent.futures

    def read(*args, **kw):  # off the caller's thread and connection, as the syncer reads it
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(query_spend, *args, **kw).result()

    spend = read([start, 0.0])
    assert spend[(("agent", org, "bot"), start)] == pytest.approx(0.30)
    assert spend[(("agent", org, "ops"), start)] == pytest.approx(0.05)
    assert spend[(("org", org), start)] == pytest.approx(0.35)
    assert spend[(("key", "sk-a"), start)] == pytest.approx(0.30)
    assert spend[(("key", "sk-b"), start)] == pytest.approx(0.05)
    assert spend[(("org", other), start)] == pytest.approx(0.70)
    assert spend[(("org", org), 0.0)] == pytest.approx(1.35)  # a total budget: every record
    assert spend[(("agent", org, "bot"), 0.0)] == pytest.approx(1.30)

    until = read([start], until=start + 20)  # a reseed's read up to its own moment: before, not at
    assert until[(("org", org), start)] == pytest.approx(0.10)
    assert (("agent", org, "ops"), start) not in until


async def test_the_spend_loader_reads_new_accounts_and_after_a_failed_read_retries_when_asked(monkeypatch, caplog):
    """SpendLoader.run (found by mutation testing): a new account is read when a request asks; with the
    database down it is FAILED (served on what this process knows) and one line says so; read again once
    the database answers, LOADED with the records' spend and one line saying after how many failures."""
    import asyncio
    import logging

    from routing.core.budget_accounts import FAILED
    from routing.runtime.cluster import shared_spend as spend
    from routing.runtime.cluster.shared_limits import SpendLoader

    org, down, reads = f"s{uuid.uuid4().hex[:8]}", [True], []

    def read_spend(starts, flush):
        reads.append(sorted(starts))
        if down[0]:
            raise RuntimeError("connection refused")
        return {(("org", org), start): 1.5 for start in starts}  # the org's budget below

    monkeypatch.setattr(spend, "read_spend", read_spend)
    budgets, spend_loader = Budgets(), SpendLoader()
    loader = asyncio.ensure_future(spend_loader.run(budgets, flush=None))
    try:
        await asyncio.sleep(0)
        assert budgets.loading and reads == []  # nothing to read until an account needs it
        with pytest.raises(Unloaded) as unloaded:
            budgets.admit(org, (2.0, "day"), "bot", None, 0.1)
        account = unloaded.value.accounts[0]
        with caplog.at_level(logging.WARNING, logger="switchboard"):
            assert await spend_loader.wait_loaded(2.0)
            assert account.state == FAILED and reads == [[account.start]]
            down[0] = False
            assert await spend_loader.wait_loaded(2.0)  # asked again: read at once, not after the backoff
        assert account.state == LOADED and account.spend() == 1.5 and len(reads) == 2
        said = [r.getMessage() for r in caplog.records]
        assert said == [
            "could not read the budgets' spend from the usage records (connection refused); retrying",
            "budgets' spend read from the usage records after 1 failed tries",
        ]
        budgets.admit(org, (2.0, "day"), "bot", None, 0.5).settle(0.5)  # $2 - $1.5 read: $0.5 fits, no more
        with pytest.raises(Exhausted):
            budgets.admit(org, (2.0, "day"), "bot", None, 0.01)
    finally:
        loader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loader
