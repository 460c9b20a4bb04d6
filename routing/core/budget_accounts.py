"""Per-org and per-agent spend budgets, by reservation (docs/limits.md#budgets).

Pure: no Django, no Redis, no database; the wall clock is injected (periods are UTC
calendar days and months). One `Budgets` per serving process holds an `Account` per
org and per (org, agent). A request is admitted only if its worst-case cost fits
what every account that applies has left; that amount is reserved, and settled with
the real cost when the answer is over (`Hold.settle`), or released when there was
no answer (`Hold.release`). So concurrent requests and streams cannot overshoot a
budget by more than the estimate's error.

Spend survives restarts and budgets added live: a background task
(routing.runtime.cluster.shared_spend.SpendLoader) loads each new account's spend of its
period from the usage records (`Account.state`); what this process settles
afterwards is added locally (docs/limits.md#durable).

Shared mode (docs/limits.md#shared): an account's allowance is a lease taken from
a cluster-wide counter by a background task (routing.runtime.cluster.shared_limits); the request
path reserves from the lease and writes what it owes, never calling Redis itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

DAY, MONTH, TOTAL = "day", "month", "total"
ORG, AGENT, KEY = "org", "agent", "key"
NEW, LOADED, FAILED = 0, 1, 2  # Account.state
RELOAD_IDLE_S = 60.0  # an account unused this long is read again from the records when used (a budget re-added)
_MICRO = 1_000_000
# Leases are sums and differences of many small floats: one that holds exactly a request may come out a
# few 1e-19 short of it. Far below the counters' µUSD, this much less is still enough.
_SLACK = 1e-12


def period_bounds(period: str, now: float) -> tuple[float, float | None]:
    """UTC start and end (epoch seconds) of the `period` that holds `now`; `total` never ends."""
    if period == TOTAL:
        return 0.0, None
    t = datetime.fromtimestamp(now, UTC)
    if period == DAY:
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.timestamp(), start.timestamp() + 86400.0
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start.timestamp(), end.timestamp()


def request_cost(input_price: float | None, output_price: float | None, prompt: int, completion: int) -> float:
    """USD of `prompt` + `completion` tokens at per-million-token prices; a missing price costs 0."""
    return (prompt * (input_price or 0.0) + completion * (output_price or 0.0)) / _MICRO


class Account:
    """One budget (an org's or an agent's) in its current period.

    Local mode: left = usd - spent - reserved. Shared mode (`lease` is not None): the
    request path reserves from `lease`, the allowance this process holds from the
    cluster counter, and notes in `owed` what the counter must still be told.
    """

    __slots__ = (
        "key",
        "usd",
        "period",
        "start",
        "end",
        "base",
        "spent",
        "reserved",
        "lease",
        "owed",
        "cluster",
        "used_at",
        "need",
        "peak",
        "state",
        "waited",
        "synced",
        "floor",
        "waiting",
        "settled",
        "reported",
    )

    def __init__(self, key: tuple[str, ...], usd: float, period: str, now: float, base: float) -> None:
        self.key = key
        self.usd = usd
        self.period = period
        self.start, self.end = period_bounds(period, now)
        self.base = base  # spend of the usage records written before this process booted
        self.spent = 0.0  # settled by this process since it booted, this period
        self.reserved = 0.0  # worst cases of this process's requests in flight
        self.lease: float | None = None  # shared mode: allowance held from the cluster counter
        self.owed = 0.0  # shared mode: spend beyond the lease, or of a fail-open share, not yet counted
        self.cluster: float | None = None  # shared mode: the cluster counter as last seen (spend + leases out)
        self.used_at = now
        self.need = 0.0  # shared mode: the summed worst cases waiting for a lease (the syncer's next ask)
        self.peak = 0.0  # the largest worst case reserved: a lease holds at least one such request
        # LOADED: `base` is the usage records' spend of the period (NEW: not yet read, FAILED: the
        # database did not answer; both retried by the spend loader).
        self.state = LOADED
        self.waited = False  # a request already waited once for this account's load
        self.synced = 0.0  # shared mode: `spent` when a lease round last reached the counter
        self.floor = False  # shared mode: reloaded; the counter is at least base + spent + reserved
        # shared mode: the summed worst cases of this process's requests waiting for a lease round; a round
        # never gives back below it, so what one round leased for them is theirs when they resume
        self.waiting = 0.0
        # shared mode: the cluster's settled-spend counter as last seen (None: not seen this period), and the
        # part of `spent` it already holds; what alerts compare against (`billed`), leases never in it
        self.settled: float | None = None
        self.reported = 0.0

    def billed(self) -> float:
        """Settled (billed) spend of the period: never allowance leased out or reserved for requests in flight.

        Shared mode: the cluster's settled counter as last seen plus what this process settled and has not
        told it yet: at most the cluster's real settled spend (the others' since their last rounds are not
        in it). Otherwise, as `spend`."""
        if self.settled is not None:
            return self.settled + self.spent - self.reported
        return self.base + self.spent

    def spend(self) -> float:
        """Spend of the period as this process knows it (settled; the cluster's in shared mode)."""
        if self.cluster is not None:  # the counter holds spend + leases out; ours is not spent
            return max(0.0, self.cluster + self.owed - (self.lease or 0.0) - self.reserved)
        return self.base + self.spent

    def left(self) -> float:
        """What a new reservation may take now."""
        if self.lease is not None:
            return self.lease
        return self.usd - self.base - self.spent - self.reserved

    def may_lease(self, amount: float) -> bool:
        """Shared mode: the lease lacks `amount` but the cluster counter, as last seen, could grant the rest."""
        if self.lease is None or amount > self.usd:
            return False
        if self.cluster is None:  # no round yet this period: the counter may have it
            return True
        return self.lease + self.usd - self.cluster - self.owed + _SLACK >= amount

    def roll(self, usd: float, period: str, now: float, base: Callable[[tuple[str, ...], float], float]) -> None:
        """Follow a changed amount or period, and start a new period when the current one is over."""
        self.usd = usd
        if period != self.period or (self.end is not None and now >= self.end):
            self.period = period
            self.start, self.end = period_bounds(period, now)
            self.base = base(self.key, self.start)
            self.spent = 0.0
            self.synced = 0.0
            self.reported = 0.0
            self.settled = None
            if self.lease is not None:  # the old period's lease and debt are the old counter's
                self.lease = 0.0
                self.owed = 0.0
                self.cluster = None

    def take(self, amount: float) -> None:
        self.reserved += amount
        if amount > self.peak:
            self.peak = amount
        if self.lease is not None:
            self.lease -= amount

    def give(self, reserved: float, cost: float) -> None:
        """Settle a reservation of `reserved` with the real `cost` (0 = released)."""
        self.reserved = max(0.0, self.reserved - reserved)
        self.spent += cost
        if self.lease is not None:
            lease = self.lease + reserved - cost
            if lease < 0:  # spent more than the lease held (the estimate was short): owed to the counter
                self.owed -= lease
                lease = 0.0
            self.lease = lease

    def resets_in(self, now: float) -> float | None:
        return None if self.end is None else max(0.0, self.end - now)


class Exhausted(Exception):
    """Admission refused: the account that cannot take `amount`, and when it resets."""

    def __init__(
        self, scope: str, account: Account, amount: float, resets_in_s: float | None, short: bool = False
    ) -> None:
        super().__init__(f"{scope} budget {account.usd}")
        self.short = short  # only leases lacked it; the cluster counters may grant it (wait for a round)
        self.lacking: list[Account] = []  # shared accounts whose lease lacks it (a round may confirm the no)
        self.accounts: list[Account] = []  # every account the request applies to (its waiter holds their leases)
        self.scope = scope
        self.account = account
        self.amount = amount
        self.resets_in_s = resets_in_s


class Unloaded(Exception):
    """Admission must wait (once, bounded) for the spend of these new accounts (routing.gateway.limiting)."""

    def __init__(self, accounts: list[Account]) -> None:
        super().__init__("budget spend not loaded yet")
        self.accounts = accounts


class Hold:
    """What one admitted request reserved, to settle or release it (once)."""

    __slots__ = ("accounts", "amount", "done")

    def __init__(self, accounts: list[Account], amount: float) -> None:
        self.accounts = accounts
        self.amount = amount
        self.done = False

    def settle(self, cost: float | None) -> None:
        """Replace the reservation with the real `cost`; None (unknown) = the reservation stands."""
        if self.done:
            return
        self.done = True
        spent = self.amount if cost is None else cost
        for account in self.accounts:
            account.give(self.amount, spent)

    def release(self) -> None:
        """No answer was produced (an error, the client left): nothing is spent."""
        self.settle(0.0)


class Budgets:
    """The process's budget accounts, keyed by org name and (org, agent) name."""

    __slots__ = ("_clock", "_accounts", "_base", "shared", "starved", "loading", "wanted")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._accounts: dict[tuple[str, ...], Account] = {}
        # (account key, period start) -> spend of the usage records before `booted` (Budgets.load)
        self._base: dict[tuple[tuple[str, ...], float], float] = {}
        self.shared = False  # accounts take leases from the cluster (routing.runtime.cluster.shared_limits)
        self.starved: Callable[[Account], None] | None = None  # told when a lease is too small
        # A spend loader runs (routing.runtime.cluster.shared_spend.SpendLoader): new accounts start NEW
        # and it reads their period's spend; without one (unit tests) they start LOADED.
        self.loading = False
        self.wanted: Callable[[], None] | None = None  # wakes the loader when an account needs reading

    def _base_of(self, key: tuple[str, ...], start: float) -> float:
        return self._base.get((key, start), 0.0)

    def _account(self, key: tuple[str, ...], budget: tuple[float, str], now: float) -> Account:
        usd, period = budget
        account = self._accounts.get(key)
        if account is None:
            start, _ = period_bounds(period, now)
            account = self._accounts[key] = Account(key, usd, period, now, self._base_of(key, start))
            if self.shared:
                account.lease = 0.0
            if self.loading:
                self._want(account)
        elif account.usd != usd or account.period != period or (account.end is not None and now >= account.end):
            period_changed = account.period != period or (account.end is not None and now >= account.end)
            account.roll(usd, period, now, self._base_of)
            if period_changed and self.loading:
                self._want(account)
        elif now - account.used_at > RELOAD_IDLE_S and self.loading:
            # unused a while (its budget may have been removed and added back): read the records again,
            # going on meanwhile with what is known
            account.state, account.waited = NEW, True
            if self.wanted is not None:
                self.wanted()
        account.used_at = now
        return account

    def _want(self, account: Account) -> None:
        account.state, account.waited = NEW, False
        if self.wanted is not None:
            self.wanted()

    def _refuse(self, short: list[tuple[str, Account]], amount: float, now: float) -> Exhausted:
        """The first account that cannot take `amount`, not even with a lease; else (only leases are
        short) a `short` refusal, each short account having added `amount` to the syncer's next ask
        (one round then leases for the agent and its org at once)."""
        for scope, account in short:
            if not account.may_lease(amount):
                refused = Exhausted(scope, account, amount, account.resets_in(now))
                refused.lacking = [a for _, a in short if a.lease is not None and amount <= a.usd]
                return refused
        for _, account in short:
            account.need += amount
            if self.starved is not None:
                self.starved(account)
        scope, account = short[0]
        return Exhausted(scope, account, amount, account.resets_in(now), short=self.starved is not None)

    def admit(
        self,
        org: str,
        org_budget: tuple[float, str] | None,
        agent: str,
        agent_budget: tuple[float, str] | None,
        amount: float,
        key: str = "",
        key_budget: tuple[float, str] | None = None,
    ) -> Hold:
        """Reserve `amount` (USD, the worst case) on every account that applies, or raise `Exhausted`.

        `*_budget` are (usd, period) or None. A refused request reserves nothing. Raises
        `Unloaded` (reserving nothing) the first time an account's spend is not read yet.
        """
        now = self._clock()
        accounts: list[Account] = []
        short: list[tuple[str, Account]] | None = None
        unloaded: list[Account] | None = None
        applies = ((AGENT, (AGENT, org, agent), agent_budget), (ORG, (ORG, org), org_budget))
        if key_budget is not None:  # the API key's own budget, by its prefix (docs/limits.md#keys)
            applies = ((KEY, (KEY, key), key_budget), *applies)
        for scope, ident, budget in applies:
            if budget is None:
                continue
            account = self._account(ident, budget, now)
            if account.state == NEW and not account.waited:
                unloaded = [*(unloaded or ()), account]
            if account.left() + _SLACK < amount:
                short = short or []
                short.append((scope, account))
            accounts.append(account)
        if unloaded is not None:
            raise Unloaded(unloaded)
        if short is not None:
            refused = self._refuse(short, amount, now)
            refused.accounts = accounts
            raise refused
        for account in accounts:
            account.take(amount)
        return Hold(accounts, amount)

    def load(self, spend: Mapping[tuple[tuple[str, ...], float], float]) -> None:
        """Take the spend of the usage records: (account key, period start) -> USD, the base of
        accounts created afterwards (tests; the spend loader sets each account's own base)."""
        self._base = dict(spend)
        for account in self._accounts.values():
            account.base = self._base_of(account.key, account.start)

    def period_starts(self, periods: Iterable[str]) -> dict[str, float]:
        """The current start of each named period (what `load` needs the spend since)."""
        now = self._clock()
        return {period: period_bounds(period, now)[0] for period in periods}

    def accounts(self) -> list[Account]:
        return list(self._accounts.values())

    def find(self, key: tuple[str, ...]) -> Account | None:
        return self._accounts.get(key)

    def forget(self) -> None:
        """Drop every account (tests)."""
        self._accounts.clear()
