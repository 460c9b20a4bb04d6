"""The lease protocol's recovery. Redis unreachable: each process carries on with an even share of what
was left of each limit, budget and capacity (÷ the processes seen alive) and says so once. Redis that lost
the budget counters (restarted empty, flushed): every one is rebuilt from the usage records before any
lease is granted again (docs/limits.md#reseed).

A mixin of `Syncer` (routing.runtime.cluster.shared_leases): one process rebuilds them under a lock
that expires, then sets a new seed marker; every process adopts the marker, adding what the records
it read cannot know of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from routing.config import live
from routing.core.admission_queue import Gates
from routing.core.budget_accounts import Account, Budgets, period_bounds
from routing.core.limiter import SharedBucket
from routing.runtime.cluster import shared_spend as spend
from routing.runtime.cluster.shared_scripts import PROCESS_TTL_S

log = logging.getLogger("switchboard")

_MICRO = 1_000_000
SEED_LOCK_S = 15  # one process rebuilds the counters of an empty Redis; another takes over after this
# How long a rebuild waits at most for the other processes to report their usage records written (a process
# that died with Redis never reports): the fallback; every process reporting ends the wait at once.
SEED_WAIT_S = 5.0
WAIT_POLL_S = 0.02  # how often the rebuild looks for the reports meanwhile

# The end of a rebuild: only while the lock is still ours and no marker appeared meanwhile (a rebuild
# over live counters would drop what was settled while it read), set every counter and the new marker,
# and clear the processes' reports of this loss (`Recovery._report_written`).
# KEYS[1] lock, KEYS[2] marker, KEYS[3] reports, KEYS[4..] counters; ARGV owner, marker, then (µUSD, ttl)
# per counter
REBUILD_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for i = 4, #KEYS do
  redis.call('SET', KEYS[i], ARGV[2 * i - 5], 'EX', ARGV[2 * i - 4])
end
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
"""

# A rebuild stopped half way (the process shutting down): its lock goes at once, only if still its own.
# KEYS[1] lock; ARGV[1] owner
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Recovery:
    """Fail open while Redis is unreachable; rebuild and adopt the budget counters it lost (a mixin: the
    syncer holds Redis, the budgets, the gates and the marker)."""

    budgets: Budgets
    flush: Callable[[], Any] | None
    seed_wait_s: float | None
    prefix: str
    id: str
    epoch: str | None
    reseeding: bool
    running: bool
    timeout_s: float
    clock: Callable[[], float]
    _redis: Any
    _rebuild: Any
    _release: Any
    _seeder: asyncio.Task | None
    _outage: set[tuple[str, ...]]
    _written: tuple[float, dict[tuple[tuple[str, ...], float], float]] | None
    gates: Gates | None
    degraded: bool
    processes: int
    peers: int  # the processes the heartbeat counted in the last round before Redis lost the counters

    async def _stop_seeder(self) -> None:
        """Stop a rebuild under way (`_reseed` frees its lock): another process takes it over at once
        instead of every process granting no budget lease until the lock expires (SEED_LOCK_S)."""
        seeder, self._seeder = self._seeder, None
        if seeder is not None and not seeder.done():
            seeder.cancel()
            await asyncio.gather(seeder, return_exceptions=True)

    async def _follow_marker(self, marker: str | None, account_results: list[Any]) -> bool:
        """Follow the counters' seed marker: rebuild them when Redis lost them, adopt a new one; True when
        adopting it refused some of this round's budgets (the caller runs once more)."""
        if marker is not None and marker == self.epoch:
            self.reseeding = False
            self.peers = self.processes  # a rebuild after a loss waits for this many processes' records
            return False
        self.reseeding = True
        if marker is None:  # Redis lost the counters (restarted empty, flushed) or never had them
            await self._note_written()
            if self.running:
                if self._seeder is None or self._seeder.done():
                    self._seeder = asyncio.get_running_loop().create_task(self._reseed())
                return False
            await self._reseed()  # driven by hand (tests)
            marker = await self._redis.get(self.prefix + "epoch")
            if marker is None:
                return False
            marker = marker.decode()
        self._adopt(marker)
        return any(int(result[1]) == -1 for result in account_results)

    def _adopt(self, marker: str) -> None:
        """Counters rebuilt from the usage records under `marker`: add what they cannot know of this process.

        The records hold what was settled and written; this process adds the allowance it holds, what
        its requests in flight reserved and what it settled that the records the rebuild read cannot
        hold: since it wrote them all (`_note_written`), when that was before the read (the time the
        marker carries); else since its last round (counted twice if written meanwhile, never missed).
        Spend during an outage, already in the records, is so counted once."""
        written = self._written
        read_at = _read_at(marker)
        marks = written[1] if written is not None and read_at is not None and written[0] <= read_at else {}
        for account in self.budgets.accounts():
            if account.lease is None:
                continue
            since = max(account.synced, marks.get((account.key, account.start), account.synced))
            account.owed = account.lease + account.reserved + max(0.0, account.spent - since)
            account.synced = account.spent
            # the settled counter was rebuilt from the same records: what they lack is told to it next round;
            # until then the alerts compare this process's own view (its view of the old counter would count
            # the same spend twice, and an alert must never come before its spend)
            account.reported, account.settled = min(account.spent, since), None
            # `cluster` stays as last seen: were Redis to go away before the next round, the fail-open
            # share is of what that view left, not of the (low) spend this process alone knows
        self._outage.clear()
        self._written = None
        self.epoch = marker
        self.reseeding = False

    async def _note_written(self) -> None:
        """Redis lost the counters: write this process's queued usage records now, note what each account had
        spent before, and report them written (`_report_written`), once per loss. The rebuild reads the records
        only once every process has reported (or after SEED_WAIT_S), so what this process settled up to here is
        in its sum and is not added again, however slow its writer was."""
        if self._written is not None:
            return
        if self.flush is None:  # nothing queued here to write (a process without a usage writer)
            self._written = (math.inf, {})
            await self._report_written()
            return
        marks = {(a.key, a.start): a.spent for a in self.budgets.accounts()}  # their records are queued
        try:
            written = await asyncio.get_running_loop().run_in_executor(None, self.flush)
        except Exception:  # noqa: BLE001 - the database is down: the rebuild cannot read them either
            written = False
        # False: some went to the spool, not the database; then, as after a failure, nothing is known written
        # (tried once per loss: while the database is down the usage writer retries on its own)
        self._written = (self.clock(), marks) if written is not False else (math.inf, {})
        await self._report_written()

    async def _report_written(self) -> None:
        """Tell the rebuild this process's records from before the loss are written (or cannot be): it need
        not wait for them. Redis failing here only makes the rebuild wait its bound."""
        reports = self.prefix + "written"
        with contextlib.suppress(Exception):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hset(reports, self.id, "1")
            pipe.expire(reports, SEED_LOCK_S * 4)
            await asyncio.wait_for(pipe.execute(), self.timeout_s)

    async def _await_writers(self, bound_s: float) -> None:
        """Until every process alive before the loss (and every one heard since) has reported its records
        written, at most `bound_s` on the syncer's clock: the fallback for a process that died with Redis."""
        deadline = self.clock() + bound_s
        while True:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hlen(self.prefix + "written")
            pipe.zcount(self.prefix + "processes", self.clock() - PROCESS_TTL_S, "+inf")
            reported, alive = await asyncio.wait_for(pipe.execute(), self.timeout_s * 2)
            if int(reported) >= max(self.peers, int(alive)) or self.clock() >= deadline:
                return
            await asyncio.sleep(WAIT_POLL_S)

    async def _reseed(self) -> None:
        """Rebuild every budget counter of an empty Redis from the usage records, then set a new marker.

        One process does it (a lock that expires, should it die). It first waits until every process has
        written the records it queued before the loss and said so (`_await_writers`, bounded), writes its
        own, then reads the period's spend of every process's records; the settled-spend counters
        (docs/alerts.md#events) get the same sums. Meanwhile no lease is granted: each process spends at
        most the allowance it holds (docs/limits.md#reseed)."""
        lock, marker = self.prefix + "seeding", self.prefix + "epoch"
        try:
            if not await self._redis.set(lock, self.id, nx=True, ex=SEED_LOCK_S):
                return  # another process is rebuilding them
            if await self._redis.exists(marker):  # rebuilt meanwhile (this round's view was older)
                await self._redis.delete(lock)
                return
            await self._await_writers(SEED_WAIT_S if self.seed_wait_s is None else self.seed_wait_s)
            now = self.clock()
            wanted = self._budgets_to_seed()
            starts = {period_bounds(period, now)[0] for _, period in wanted.values()}
            marks = {(a.key, a.start): a.spent for a in self.budgets.accounts()}  # written by the read's flush
            prior, epoch = self._written, uuid.uuid4().hex
            settled = True
            try:
                loop = asyncio.get_running_loop()
                spend_read = await loop.run_in_executor(None, spend.read_spend, starts, self.flush)
                self._written, epoch = (now, marks), f"{epoch}@{now!r}"  # when the records were read
                source = "the usage records"
            except Exception as exc:  # noqa: BLE001 - the database is down too: this process's last view
                spend_read = self._own_view(now)  # no records read: every process adds its spend since its last round
                source = f"this process's last view (the usage records could not be read: {exc})"
                settled = False  # that view holds leases: the settled counters are seeded afresh by the rounds
            keys, args = [lock, marker, self.prefix + "written"], [self.id, epoch]
            for key, (_usd, period) in wanted.items():
                start, end = period_bounds(period, now)
                ttl = max(int(end - now + 86400) if end is not None else 400 * 86400, 60)
                used = int(spend_read.get((key, start), 0.0) * _MICRO)
                keys.append(f"{self.prefix}budget:{int(start)}:{'/'.join(key)}")
                args += [used, ttl]
                if settled:
                    keys.append(f"{self.prefix}settled:{int(start)}:{'/'.join(key)}")
                    args += [used, ttl]
            if not await self._rebuild(keys=keys, args=args):
                self._written = prior  # what it noted before holds against the other's read, not this one
                return  # the lock expired and another process rebuilt them: its counters stand
            log.warning(
                "shared limits: Redis had no budget counters (restarted empty or flushed); %d rebuilt from %s",
                len(wanted),
                source,
            )
        except asyncio.CancelledError:  # the process is stopping: free the lock for another process now
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._release(keys=[lock], args=[self.id]), self.timeout_s)
            raise
        except Exception as exc:  # noqa: BLE001 - Redis went away again: the next round tries again
            log.warning("shared limits: could not rebuild the budget counters (%s); trying again", exc)

    def _budgets_to_seed(self) -> dict[tuple[str, ...], tuple[float, str]]:
        """The configuration's budgets and those this process has accounts for."""
        wanted = {a.key: (a.usd, a.period) for a in self.budgets.accounts()}
        try:
            wanted.update(spend.budgeted(live.current()))
        except Exception:  # noqa: BLE001 - no configuration loaded (tests driving the syncer alone)
            pass
        return wanted

    def _own_view(self, now: float) -> dict[tuple[tuple[str, ...], float], float]:
        """The spend of each account as last seen (the counter, which also counts leases out: never less)."""
        view: dict[tuple[tuple[str, ...], float], float] = {}
        for a in self.budgets.accounts():
            known = a.cluster if a.cluster is not None else a.base + a.spent
            view[(a.key, a.start)] = known + (a.owed if a.cluster is not None else 0.0)
        return view

    def _fail_open(self, accounts: list[Account], buckets: list[SharedBucket], exc: Exception) -> None:
        """Carry on with an even share of each limit and of what was left of each budget."""
        if not self.degraded:
            self.degraded = True
            live.set_degraded("redis", True, "limits")
            log.warning(
                "shared limits: Redis unreachable (%s); each process enforces an even share (1/%d) of each "
                "limit, budget and deployment capacity until it is back",
                exc,
                self.processes,
            )
        if self.gates is not None:
            self.gates.seat(None)  # even shares until Redis answers again
        now = time.monotonic()
        for bucket in buckets:
            if not bucket.divisor:  # a local bucket of capacity ÷ N, full: never refuse for want of Redis
                bucket.divisor = self.processes
                bucket.stamp = now
                bucket.level = max(bucket.level, bucket.capacity / self.processes)
        for account in accounts:
            if account.key in self._outage:
                continue
            self._outage.add(account.key)
            known = account.cluster if account.cluster is not None else account.base + account.spent
            share = max(0.0, account.usd - known) / self.processes
            account.lease = (account.lease or 0.0) + share
            account.owed += share  # counted when Redis is back; what is left over is given back then


def _read_at(marker: str) -> float | None:
    """When the rebuild under `marker` read the usage records (wall clock); None for a marker without it."""
    _, at, when = marker.rpartition("@")
    try:
        return float(when) if at else None
    except ValueError:
        return None
