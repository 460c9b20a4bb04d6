"""Budgets' spend from the usage records: the database side of shared limits (docs/limits.md#durable).

Every new budget account (a process's first requests, a budget added or changed live, a new
period) gets its period's spend from one aggregate query of every process's usage records,
so neither a restart nor a live change forgets spend; once more a little after boot, for
records a previous process left in the spool. The loader is the process's
(`Process.spend`, a `SpendLoader`); it runs as a background task, never on the request path:
a request of a new account waits (bounded) for its next pass (`SpendLoader.wait_loaded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from routing.config.snapshot import Snapshot
from routing.core.budget_accounts import AGENT, FAILED, KEY, LOADED, NEW, ORG, Account, Budgets
from routing.models import UsageRecord

log = logging.getLogger("switchboard")


def budgeted(snapshot: Snapshot) -> dict[tuple[str, ...], tuple[float, str]]:
    """Every budget of `snapshot`: account key -> (usd, period)."""
    out: dict[tuple[str, ...], tuple[float, str]] = {}
    for org in snapshot.orgs.values():
        if org.budget is not None:
            out[(ORG, org.name)] = org.budget
    for key in snapshot.keys.values():
        agent = key.agent
        if agent.budget is not None:
            out[(AGENT, agent.org.name, agent.name)] = agent.budget
        if key.budget is not None:
            out[(KEY, key.prefix)] = key.budget
    return out


def query_spend(starts: Iterable[float], until: float | None = None) -> dict[tuple[tuple[str, ...], float], float]:
    """Spend (USD) of the usage records from each period start (up to `until`, else all written so far),
    per API key, agent and org: every process's records, the cluster's truth (docs/limits.md#durable)."""
    from django.db import close_old_connections
    from django.db.models import Sum

    out: dict[tuple[tuple[str, ...], float], float] = {}
    close_old_connections()
    try:
        for start in set(starts):
            rows = UsageRecord.objects.filter(cost__isnull=False)
            if until is not None:
                rows = rows.filter(created_at__lt=datetime.fromtimestamp(until, UTC))
            if start > 0:
                rows = rows.filter(created_at__gte=datetime.fromtimestamp(start, UTC))
            for row in rows.values("org", "agent", "key_prefix").annotate(total=Sum("cost")).order_by():
                total = float(row["total"] or 0)
                for key in ((AGENT, row["org"], row["agent"]), (ORG, row["org"]), (KEY, row["key_prefix"])):
                    out[(key, start)] = out.get((key, start), 0.0) + total
    finally:
        close_old_connections()
    return out


def read_spend(starts: Iterable[float], flush: Callable[[], Any] | None) -> dict[tuple[tuple[str, ...], float], float]:
    """Off the loop: write this process's queued usage records first, then read the spend, so a record
    settled before the read is in the sum or (settled meanwhile) in the account's own `spent`."""
    if flush is not None:
        try:
            flush()
        except Exception:  # noqa: BLE001 - the database is down: the query below says so
            pass
    return query_spend(starts)


async def load_accounts(
    budgets: Budgets, accounts: list[Account], flush: Callable[[], Any] | None
) -> dict[tuple[tuple[str, ...], float], float]:
    """Give `accounts` their period's spend from the usage records (every process's, written up to now).

    What an account settled before the read is in the sum; what it settles during it stays in `spent`
    (counted twice only if also written before the read ends: a conservative error of one flush)."""
    loop = asyncio.get_running_loop()
    marks = [(a, a.start, a.spent) for a in accounts]
    spend = await loop.run_in_executor(None, read_spend, {a.start for a in accounts}, flush)
    for account, start, spent in marks:
        if account.start != start:  # the period rolled meanwhile: read again
            continue
        if account.state != NEW or account.waited:
            account.floor = account.lease is not None  # the cluster counter may lag it: see Syncer
        account.base = spend.get((account.key, start), 0.0)
        account.spent -= spent
        account.synced -= spent
        account.reported -= spent  # what the settled counter holds of `spent` shifts with it
        account.state = LOADED
    return spend


class SpendLoader:
    """One process's spend loader: the events by which a request of a new account asks for the next pass
    and waits for it (None until the loader runs: a process without background tasks has none)."""

    def __init__(self) -> None:
        self.wanted: asyncio.Event | None = None  # a request waits for the spend of a new account
        self.done: asyncio.Event | None = None

    def _want(self) -> None:
        if self.wanted is not None:
            self.wanted.set()

    async def run(self, budgets: Budgets, again_after_s: float = 30.0, flush: Callable[[], Any] | None = None) -> None:
        """Read the spend of every new account (a process's first requests, a budget added or changed
        live, a new period) off the request path; again once a while later, for records a previous
        process left in its spool and that this one replays (docs/limits.md#durable)."""
        loop = asyncio.get_running_loop()
        self.wanted, self.done = asyncio.Event(), asyncio.Event()
        budgets.loading = True
        budgets.wanted = self._want
        failures = 0
        again_at = loop.time() + again_after_s
        while True:
            again = bool(again_at) and loop.time() >= again_at
            todo = [a for a in budgets.accounts() if again or a.state != LOADED]
            if todo:
                try:
                    await load_accounts(budgets, todo, flush)
                except Exception as exc:  # noqa: BLE001 - database down: budgets count this process's spend only
                    for account in todo:
                        if account.state == NEW:
                            account.state = FAILED
                    failures += 1
                    if failures == 1:
                        log.warning("could not read the budgets' spend from the usage records (%s); retrying", exc)
                else:
                    if failures:
                        log.warning("budgets' spend read from the usage records after %d failed tries", failures)
                    failures = 0
                    if again:
                        again_at = 0.0
            self.done.set()
            self.done = asyncio.Event()
            self.wanted.clear()
            try:  # asyncio.timeout, not wait_for: see Syncer.run
                async with asyncio.timeout(min(5.0, 0.5 * 2**failures) if failures else 1.0):
                    await self.wanted.wait()
            except TimeoutError:
                pass

    async def wait_loaded(self, timeout_s: float) -> bool:
        """Request path, once per new account: wait (bounded) for the loader's next pass.

        False when the loader does not run (tests of the request path alone)."""
        if self.wanted is None or self.done is None:
            await asyncio.sleep(0)  # spawned by this very request (daphne): one loop turn lets it begin
        if self.wanted is None or self.done is None:
            return False
        done = self.done
        self.wanted.set()
        try:  # asyncio.timeout, not wait_for: see Syncer.run
            async with asyncio.timeout(timeout_s):
                await done.wait()
        except TimeoutError:
            pass
        return True
