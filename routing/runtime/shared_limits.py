"""Budgets' spend from the usage records, and budgets shared across processes through Redis.

Two background tasks of the composition root; neither is on the request path.

- `run_spend_loader`: every new budget account (a process's first requests, a budget
  added or changed live, a new period) gets its period's spend from one aggregate query
  of every process's usage records, so neither a restart nor a live change forgets spend
  (docs/limits.md#durable); once more a little after boot, for records a previous
  process left in the spool.
- `Syncer.run` (with REDIS_URL): **cluster leases** (docs/limits.md#shared). Every budget
  has a counter in Redis per period = the cluster's settled spend + the allowance leased
  out to processes. Each process leases a small share ahead of use (a Lua script that
  never grants past the budget), reserves from it locally, tells the counter what it
  spent beyond the lease, and gives back what it holds when idle. The request path
  never calls Redis: a request the local lease cannot cover adds what it needs to the
  next round's ask, wakes the syncer and waits (bounded) for the rounds that lease it. Deployments' rpm/tpm capacity (routing.core.picking)
  is leased the same way, from cluster token buckets of the same script. Redis
  unreachable → each process carries on with an even share of what was left (÷ the
  processes seen alive), says so once (log line, `switchboard_degraded{component="redis"}`),
  and re-syncs by itself. A Redis that lost its data (no seed marker) gets every budget
  counter rebuilt from the usage records before any lease is granted again
  (docs/limits.md#reseed).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from routing.config import live
from routing.config.snapshot import Snapshot
from routing.core.admission_queue import Gates
from routing.core.budget_accounts import AGENT, FAILED, KEY, LOADED, NEW, ORG, Account, Budgets, period_bounds
from routing.core.limiter import Limiter, SharedBucket
from routing.core.picking import Balancer
from routing.models import UsageRecord
from routing.runtime import metrics

log = logging.getLogger("switchboard")

_MICRO = 1_000_000
LEASE_FRACTION = 0.05  # a lease is at least this share of the budget (or one request's worst case)
IDLE_S = 2.0  # a lease unused this long is given back
PROCESS_TTL_S = 10.0  # a process not heard from this long no longer counts for the even share
BEAT_S = 1.0  # heartbeat of a process with concurrency limits and nothing else to share
KEY_PREFIX = "switchboard:limits:"  # + the cluster's namespace (one per database: Syncer.namespace)

# The lease: add what the process owes (spent beyond its lease, or an outage share), then
# grant up to `want` without passing the limit (want < 0 gives back). Seeded when absent; with
# `floor` set, raised to at least the seed (an account read again from the records). Nothing
# happens while the cluster's seed marker is not the epoch the process synced with: Redis lost
# the counters and they are being rebuilt from the usage records (Syncer._reseed) -> {-1, -1}.
# KEYS[1] counter, KEYS[2] seed marker; ARGV limit, want, owed, seed, ttl, epoch, floor
# (amounts µUSD, ttl s) -> {grant, counter}
LEASE_SCRIPT = """
if redis.call('GET', KEYS[2]) ~= ARGV[6] then return {-1, -1} end
local cur = tonumber(redis.call('GET', KEYS[1]) or ARGV[4])
if ARGV[7] == '1' then cur = math.max(cur, tonumber(ARGV[4])) end
local limit = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
cur = cur + tonumber(ARGV[3])
local grant = want
if want > 0 then
  grant = math.min(want, limit - cur)
  if grant < 0 then grant = 0 end
end
cur = cur + grant
redis.call('SET', KEYS[1], string.format('%.0f', cur), 'EX', ARGV[5])
return {grant, cur}
"""

# A cluster token bucket (the level refilled by Redis's own clock, capacity per minute), from
# which processes take shares: add the debt, then grant up to `want` whole tokens (want < 0
# gives back). An absent key starts at `seen`: the level the asking process last saw, refilled
# since (full for a bucket it never saw), so a bucket Redis lost (restarted empty, flushed, the
# key gone) does not reopen in full (docs/limits.md#reseed). KEYS[1] hash; ARGV capacity, want,
# owed, ttl, seen.
BUCKET_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cap = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'l', 's')
local lvl = tonumber(state[1]) or math.min(tonumber(ARGV[5]), cap)
local st = tonumber(state[2]) or now
lvl = lvl + (now - st) * cap / 60
if lvl > cap then lvl = cap end
lvl = lvl - tonumber(ARGV[3])
local want = tonumber(ARGV[2])
local grant = want
if want > 0 then
  grant = math.floor(math.min(want, lvl))
  if grant < 0 then grant = 0 end
end
lvl = lvl - grant
if lvl > cap then lvl = cap end
redis.call('HSET', KEYS[1], 'l', tostring(lvl), 's', string.format('%.6f', now))
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {tostring(grant), tostring(lvl)}
"""
BUCKET_TTL_S = 120  # a bucket untouched this long is full again: its key may go
# A deployment's concurrency seats (docs/overload.md#processes): the cluster's `max` split between the
# processes calling it by demand, not evenly. Each process sends its demand (calls in flight + requests
# waiting) and wants a quarter more (at least 1: room for its limit to grow into; nothing without demand).
# Its fair share is
# max-min fair over the wants of every live process that calls the deployment: a process wanting less
# than an equal share gets what it wants, the others split the rest equally; seats nobody wants are
# split evenly over all live processes (those that have not called it yet too), so an idle process keeps
# room for a burst until another needs it. It gets at most what the other live processes do not hold
# (0 when they hold them all: its requests wait), so the cluster never holds more than `max`. It records
# what it holds, "holds:demand": its seats, or its calls in flight if more (admitted on seats it had:
# nobody may take those before they end). A process no longer alive (not in the processes set) is
# dropped. KEYS[1] hash, KEYS[2] processes; ARGV me, in flight, demand, max, ttl -> {seats, contended:
# 1 when the processes want more than the max between them, and each should come back every round}.
SEATS_SCRIPT = """
local alive, n = {}, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do alive[id] = true; n = n + 1 end
local function want(d) if d <= 0 then return 0 end return d + math.max(1, math.ceil(d / 4)) end
local total = tonumber(ARGV[4])
local mine = want(tonumber(ARGV[3]))
local wants, held, asked = {mine}, 0, mine
local rows = redis.call('HGETALL', KEYS[1])
for i = 1, #rows, 2 do
  local id = rows[i]
  if id ~= ARGV[1] then
    if alive[id] then
      local h, d = string.match(rows[i + 1], '^(%d+):(%d+)$')
      held = held + (tonumber(h) or 0)
      local w = want(tonumber(d) or 0)
      wants[#wants + 1] = w
      asked = asked + w
    else
      redis.call('HDEL', KEYS[1], id)
    end
  end
end
if n < #wants then n = #wants end
local fair = mine
if asked <= total then
  fair = mine + math.ceil((total - asked) / n)
else
  table.sort(wants)
  local left, count = total, #wants
  for _, w in ipairs(wants) do
    if w > left / count then break end
    left = left - w
    count = count - 1
  end
  if count > 0 then fair = math.min(mine, math.ceil(left / count)) end
end
local seats = math.max(math.min(fair, total - held), 0)
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', math.max(seats, tonumber(ARGV[2])), tonumber(ARGV[3])))
redis.call('EXPIRE', KEYS[1], ARGV[5])
if asked > total then return {seats, 1} end
return {seats, 0}
"""
SEATS_TTL_S = 60  # a deployment nobody has called this long: its seats hash may go

SEED_LOCK_S = 15  # one process rebuilds the counters of an empty Redis; another takes over after this

# The end of a rebuild: only while the lock is still ours and no marker appeared meanwhile (a rebuild
# over live counters would drop what was settled while it read), set every counter and the new marker.
# KEYS[1] lock, KEYS[2] marker, KEYS[3..] counters; ARGV owner, marker, then (µUSD, ttl) per counter
REBUILD_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for i = 3, #KEYS do
  redis.call('SET', KEYS[i], ARGV[2 * i - 3], 'EX', ARGV[2 * i - 2])
end
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


# ---------------------------------------------------------------- spend at boot


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


_load_wanted: asyncio.Event | None = None  # a request waits for the spend of a new account
_load_done: asyncio.Event | None = None


def _wanted() -> None:
    if _load_wanted is not None:
        _load_wanted.set()


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
        account.state = LOADED
    return spend


async def run_spend_loader(
    budgets: Budgets, again_after_s: float = 30.0, flush: Callable[[], Any] | None = None
) -> None:
    """Read the spend of every new account (a process's first requests, a budget added or changed
    live, a new period) off the request path; again once a while later, for records a previous
    process left in its spool and that this one replays (docs/limits.md#durable)."""
    global _load_wanted, _load_done
    loop = asyncio.get_running_loop()
    _load_wanted, _load_done = asyncio.Event(), asyncio.Event()
    budgets.loading = True
    budgets.wanted = _wanted
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
        _load_done.set()
        _load_done = asyncio.Event()
        _load_wanted.clear()
        try:  # asyncio.timeout, not wait_for: see Syncer.run
            async with asyncio.timeout(min(5.0, 0.5 * 2**failures) if failures else 1.0):
                await _load_wanted.wait()
        except TimeoutError:
            pass


async def wait_loaded(timeout_s: float) -> bool:
    """Request path, once per new account: wait (bounded) for the loader's next pass.

    False when no loader runs in this process (tests of the request path alone)."""
    if _load_wanted is None or _load_done is None:
        await asyncio.sleep(0)  # spawned by this very request (daphne): one loop turn lets it begin
    if _load_wanted is None or _load_done is None:
        return False
    done = _load_done
    _load_wanted.set()
    try:  # asyncio.timeout, not wait_for: see Syncer.run
        async with asyncio.timeout(timeout_s):
            await done.wait()
    except TimeoutError:
        pass
    return True


# ---------------------------------------------------------------- cluster leases


class Syncer:
    """The background side of shared limits, budgets and deployment capacity: one Redis round per interval
    for every active one."""

    def __init__(
        self,
        budgets: Budgets,
        limiter: Limiter,
        redis_url: str,
        interval_s: float = 0.2,
        timeout_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        namespace: str = "",
        balancer: Balancer | None = None,
        flush: Callable[[], Any] | None = None,
        seed_wait_s: float | None = None,
        gates: Gates | None = None,
    ) -> None:
        self.prefix = f"{KEY_PREFIX}{namespace}:" if namespace else KEY_PREFIX
        self.budgets = budgets
        self.limiter = limiter
        self.balancer = balancer  # deployments' rpm/tpm capacity (docs/deployments.md#capacity), same buckets
        # deployments' concurrency limits: split over the processes the heartbeat counts (docs/overload.md#processes)
        self.gates = gates
        self._counted = False  # this process is in the cluster's list (a heartbeat got through)
        self._beat_at = -1e18  # the last heartbeat (a round with nothing else to share beats every BEAT_S)
        self.redis_url = redis_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.id = uuid.uuid4().hex
        self.processes = 1  # processes seen alive (for the fail-open share)
        self.degraded = False
        self.running = False
        self._wake: asyncio.Event | None = None
        self._round: asyncio.Future | None = None
        self._redis: Any = None
        self._lease: Any = None
        self._take: Any = None
        self._rebuild: Any = None
        self._release: Any = None
        self._seats: Any = None
        self._contended = False  # the last seats round: the processes want more than a deployment's max
        self._outage: set[tuple[str, ...]] = set()  # accounts given their outage share
        # The cluster's seed marker this process's counters belong to (docs/limits.md#reseed): None
        # until the first round; a different marker (or none) means Redis lost the counters.
        self.epoch: str | None = None
        self.reseeding = False  # the marker is not ours: no lease is granted until it is
        self.flush = flush  # writes this process's queued usage records (before the spend is read)
        self.seed_wait_s = seed_wait_s  # how long a reseed waits for the records other processes queued
        self._seeder: asyncio.Task | None = None
        # Since Redis lost the counters: when this process's records were last all written (wall clock), and
        # what each account (key, period start) had spent by then; None until it notices (`_note_written`)
        self._written: tuple[float, dict[tuple[tuple[str, ...], float], float]] | None = None
        budgets.shared = True
        budgets.starved = self.starved
        limiter.shared = True
        if balancer is not None:
            balancer.share(self)
        if gates is not None:
            gates.on_new = self.starved

    def starved(self, account: Account | None = None) -> None:
        """A request found its share too small (request path: only sets an event)."""
        if self._wake is not None:
            self._wake.set()

    async def wait_round(self, timeout_s: float) -> bool:
        """Wake the syncer and wait for its next round to end; False if none ended within `timeout_s`."""
        if not self.running:
            # Spawned by the same request that got here (daphne sends no lifespan: the first request
            # starts the background tasks): one loop turn lets the task begin.
            await asyncio.sleep(0)
        if not self.running or self._round is None or self._wake is None:
            return False
        round_ = self._round
        self._wake.set()
        try:  # asyncio.timeout, not wait_for: see Syncer.run
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(round_)
        except TimeoutError:
            return False
        return True

    def connect(self) -> None:
        """The Redis client and scripts (connections are made on first use)."""
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(
            self.redis_url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s
        )
        self._lease = self._redis.register_script(LEASE_SCRIPT)
        self._take = self._redis.register_script(BUCKET_SCRIPT)
        self._rebuild = self._redis.register_script(REBUILD_SCRIPT)
        self._release = self._redis.register_script(RELEASE_SCRIPT)
        self._seats = self._redis.register_script(SEATS_SCRIPT)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._round = loop.create_future()
        self.connect()
        self.running = True
        try:
            await self.hello()
            while True:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns when its awaitable ends
                # in the same loop pass as a cancellation, losing the cancellation (the task never stops).
                try:
                    async with asyncio.timeout(self.interval_s):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                done, self._round = self._round, loop.create_future()
                try:
                    await self.sync_once()
                finally:
                    if not done.done():
                        done.set_result(None)
        finally:
            self.running = False
            await self._stop_seeder()
            if self._counted:  # stopping: the others' shares grow at their next round, not in PROCESS_TTL_S
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._redis.zrem(self.prefix + "processes", self.id), self.timeout_s)
            await self.close()

    async def _stop_seeder(self) -> None:
        """Stop a rebuild under way (`_reseed` frees its lock): another process takes it over at once
        instead of every process granting no budget lease until the lock expires (SEED_LOCK_S)."""
        seeder, self._seeder = self._seeder, None
        if seeder is not None and not seeder.done():
            seeder.cancel()
            await asyncio.gather(seeder, return_exceptions=True)

    async def hello(self) -> None:
        """Connect and count the processes before any request needs a share: the first round of a burst
        then finds a connection open (a connect under the burst's load may time out and fail open) and
        an outage share ÷ the processes really there, not ÷ 1. A failure here is the first round's to
        notice."""
        now = self.clock()
        processes = self.prefix + "processes"
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zadd(processes, {self.id: now})
            pipe.zremrangebyscore(processes, 0, now - PROCESS_TTL_S)
            pipe.zcard(processes)
            results = await asyncio.wait_for(pipe.execute(), self.timeout_s * 2)
        except Exception:  # noqa: BLE001 - Redis down at boot: the rounds fail open and say so
            return
        self._count(results[2])

    def _count(self, alive: Any) -> None:
        """The heartbeat's count of serving processes: the fail-open share's divisor and the concurrency split."""
        self._counted = True
        self.processes = max(1, int(alive))
        metrics.LIMIT_PROCESSES.set(self.processes)
        if self.gates is not None:
            self.gates.split(self.processes)

    def _beat_due(self, mono: float) -> bool:
        """Concurrency limits configured: the count of processes and the seats are kept fresh even with nothing
        else to share, once every BEAT_S; every round while requests wait for a deployment here, or while the
        processes want more seats than there are (an idle one then gives its seats back within a round, not a
        second: docs/overload.md#processes)."""
        gates = self.gates
        if gates is None or not gates.on:
            return False
        return mono - self._beat_at >= BEAT_S or self._contended or gates.hungry()

    # planning: what to ask of each counter and bucket; give-backs leave the share at once. A round asks
    # for the summed need of the requests waiting for it (taken here: requests that come to wait while
    # the round is under way ask the next one) and a share ahead of use, so the fast path admits the
    # requests that follow without a round. Near the end of the allowance (less than a share per process
    # left in the cluster beyond the waiters' need) it asks for the need only, and gives back what it
    # holds beyond it: in a burst, what one process holds ahead would be refused to the waiters of
    # another, and a request refused elsewhere finds nothing idle here after this process's next round
    # (docs/limits.md#shared). Under a steady load far from the end, a round that asked for the need
    # alone left the share empty for the next request: every request then waited for a round. What a
    # round leased for waiters stays theirs until they resume (`Account.waiting`): a round woken during
    # the last one begins before they do, and would otherwise give it back as held ahead of use.

    def _plan_account(self, account: Account, now: float, ahead: bool = True) -> tuple[int, int, int]:
        """(want, owed, seed) in µUSD for one budget; `ahead=False`: no share ahead of use (a re-run)."""
        lease = account.lease or 0.0
        need, account.need = account.need, 0.0
        target = 0.0
        if ahead and now - account.used_at <= IDLE_S:
            share = min(account.usd, max(account.usd * LEASE_FRACTION, account.peak))
            rest = account.usd if account.cluster is None else account.usd - account.cluster + lease
            if rest - need >= self.processes * share:
                target = share
        want = round((target + need - lease) * _MICRO, 3)
        if want < 0:  # never from under the waiters: a round begun before they resumed would take their lease
            want = min(0.0, round((max(target + need, account.waiting) - lease) * _MICRO, 3))
        micro = math.ceil(want) if want > 0 else round(want)  # asks never short of a request
        if micro < 0:
            account.lease = lease + micro / _MICRO  # give back what is held beyond the share and the waiters
        seed = account.base + account.spent + account.reserved
        # to the nearest µUSD (a float sum such as 0.1 - 3e-17, truncated, lost one); the rest stays owed
        return micro, round(account.owed * _MICRO), round(seed * _MICRO)

    def _plan_bucket(self, bucket: SharedBucket, now: float) -> tuple[float, float]:
        """(want, owed) tokens for one bucket."""
        if bucket.divisor:  # on a local share (Redis was down): ask for a fresh share, owe nothing
            bucket.need = 0.0
            return float(min(bucket.capacity, max(1.0, math.ceil(bucket.capacity * LEASE_FRACTION)))), 0.0
        owed = 0.0
        if bucket.level < 0:  # charged beyond the share (a tpm correction): owed to the cluster bucket
            owed, bucket.level = -bucket.level, 0.0
        level = bucket.level
        need, bucket.need = bucket.need, 0.0
        target = 0.0
        if now - bucket.used_at <= IDLE_S:
            share = min(bucket.capacity, max(1.0, math.ceil(bucket.capacity * LEASE_FRACTION), bucket.peak))
            if bucket.cluster_level() + level - need >= self.processes * share:
                target = share
        want = target + need - level
        if want > 0:
            want = float(math.ceil(want))
        elif want < 0:
            bucket.level = level + want  # give back what is held beyond the share and the waiters
        return want, owed

    async def sync_once(self) -> None:
        """One round: heartbeat, then lease / settle / give back for every shared budget and bucket.

        A round that finds a new seed marker takes it (`_adopt`) and runs once more at once."""
        if await self._sync_round():
            await self._sync_round(budgets_only=True)  # the buckets had theirs: asking again would give back

    async def _sync_round(self, budgets_only: bool = False) -> bool:
        """One pipeline to Redis for every due budget and bucket; True when counters rebuilt under a new
        marker refused some of it (the caller runs once more)."""
        now = self.clock()
        mono = time.monotonic()
        accounts, buckets = self._due(now, mono, budgets_only)
        if not accounts and not buckets and not self.degraded and not self._beat_due(mono):
            return False  # nothing to share now: no Redis traffic (while degraded, the heartbeat tells when it is back)
        self._beat_at = mono
        # a re-run right after adopting rebuilt counters only redoes what they refused: no share ahead,
        # which a round with waiters never takes (docs/limits.md#shared)
        account_plans = [
            (a, a.start, *self._plan_account(a, now, not budgets_only)) for a in accounts if a.state != NEW
        ]
        bucket_plans = [(b, *self._plan_bucket(b, mono)) for _, b in buckets]
        seat_plans = [] if budgets_only or self.gates is None or not self.gates.on else self.gates.claims()
        try:
            results = await self._send(now, account_plans, buckets, bucket_plans, seat_plans)
        except Exception as exc:  # noqa: BLE001 - Redis down: fail open on local shares
            for account, start, want, _, _ in account_plans:
                if want < 0 and account.start == start:
                    account.lease = (account.lease or 0.0) - want / _MICRO  # the give-back did not happen
            for bucket, want, owed in bucket_plans:
                if not bucket.divisor:
                    bucket.level += (-want if want < 0 else 0.0) - owed
            self._fail_open(accounts, [b for _, b in buckets], exc)
            return False
        self._count(results[2])
        marker = results[3].decode() if results[3] else None
        rest = results[4:]
        leased = len(account_plans) + len(bucket_plans)
        self._apply(account_plans, bucket_plans, rest[:leased], mono)
        self._apply_seats(seat_plans, rest[leased:])
        if self.degraded:
            self.degraded = False
            self._outage.clear()
            live.set_degraded("redis", False, "limits")  # the aggregate component of docs/metrics.md
            log.warning("shared limits: Redis reachable again; limits and budgets are shared across processes again")
        return await self._follow_marker(marker, rest[: len(account_plans)])

    def _due(self, now: float, mono: float, budgets_only: bool) -> tuple[list[Account], list[tuple[Any, SharedBucket]]]:
        """The budgets and buckets this round syncs."""
        # Idle ones holding nothing and owing nothing cost no Redis call (removed limits, quiet callers).
        accounts = [
            a
            for a in self.budgets.accounts()
            if a.lease is not None and (a.lease or a.owed or now - a.used_at <= IDLE_S)
        ]
        items = self.limiter.items()
        if self.balancer is not None:
            items += self.balancer.buckets()
        buckets = [
            (k, b)
            for k, b in items
            if isinstance(b, SharedBucket) and (b.level or b.divisor or mono - b.used_at <= IDLE_S) and not budgets_only
        ]
        return accounts, buckets

    async def _send(
        self,
        now: float,
        account_plans: list[Any],
        buckets: list[Any],
        bucket_plans: list[Any],
        seat_plans: list[tuple[str, int, int, int]],
    ) -> Any:
        """The round's pipeline: heartbeat, epoch, one lease per budget, one take per bucket, seats per gate."""
        pipe = self._redis.pipeline(transaction=False)
        processes = self.prefix + "processes"
        pipe.zadd(processes, {self.id: now})
        pipe.zremrangebyscore(processes, 0, now - PROCESS_TTL_S)
        pipe.zcard(processes)
        pipe.get(self.prefix + "epoch")
        for account, _start, want, owed, seed in account_plans:
            ttl = int((account.end - now) + 86400) if account.end is not None else 400 * 86400
            args = [int(account.usd * _MICRO), want, owed, seed, max(ttl, 60), self.epoch or "", int(account.floor)]
            keys = [account_key(account, self.prefix), self.prefix + "epoch"]
            await self._lease(keys=keys, args=args, client=pipe)
        mono = time.monotonic()
        for (key, bucket), (_, want, owed) in zip(buckets, bucket_plans, strict=True):
            args = [repr(bucket.capacity), repr(want), repr(owed), BUCKET_TTL_S, repr(bucket.seen_at(mono))]
            await self._take(keys=[bucket_key(key, self.prefix)], args=args, client=pipe)
        for name, total, demand, inflight in seat_plans:
            args = [self.id, inflight, demand, total, SEATS_TTL_S]
            await self._seats(keys=[seats_key(name, self.prefix), processes], args=args, client=pipe)
        return await asyncio.wait_for(pipe.execute(), self.timeout_s * 2)

    def _apply_seats(self, seat_plans: list[tuple[str, int, int, int]], results: list[Any]) -> None:
        """The seats Redis granted each gate of this process; whether the processes want more than there is."""
        if self.gates is not None:
            self.gates.seat({plan[0]: int(seats) for plan, (seats, _) in zip(seat_plans, results, strict=True)})
            self._contended = any(int(contended) for _, contended in results)

    def _apply(self, account_plans: list[Any], bucket_plans: list[Any], rest: list[Any], mono: float) -> None:
        """What the counters granted: leases and spend for the budgets, shares and pools for the buckets."""
        for (account, start, want, owed, _), (grant, counter) in zip(account_plans, rest, strict=False):
            if int(counter) == -1:  # the counters are being rebuilt: nothing happened, the give-back neither
                if want < 0 and account.start == start:
                    account.lease = (account.lease or 0.0) - want / _MICRO
                elif want > 0:
                    account.need += want / _MICRO  # the waiters still wait: asked again next round
                continue
            if account.start != start:  # the period rolled meanwhile: that counter is the old period's
                continue
            account.floor = False
            account.synced = account.spent
            account.owed -= owed / _MICRO
            if int(grant) > 0:
                account.lease = (account.lease or 0.0) + int(grant) / _MICRO
            account.cluster = int(counter) / _MICRO
        for (bucket, _want, _owed), (grant, pool) in zip(bucket_plans, rest[len(account_plans) :], strict=True):
            granted = max(0.0, float(grant))
            if bucket.divisor:  # back from a local share: what it held was never the cluster's
                bucket.level, bucket.divisor = granted, 0
            else:
                bucket.level += granted
            bucket.pool = float(pool)
            bucket.pool_at = mono

    async def _follow_marker(self, marker: str | None, account_results: list[Any]) -> bool:
        """Follow the counters' seed marker: rebuild them when Redis lost them, adopt a new one; True when
        adopting it refused some of this round's budgets (the caller runs once more)."""
        if marker is not None and marker == self.epoch:
            self.reseeding = False
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
        return any(int(counter) == -1 for _, counter in account_results)

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
            # `cluster` stays as last seen: were Redis to go away before the next round, the fail-open
            # share is of what that view left, not of the (low) spend this process alone knows
        self._outage.clear()
        self._written = None
        self.epoch = marker
        self.reseeding = False

    async def _note_written(self) -> None:
        """Redis lost the counters: write this process's queued usage records now and note what each account
        had spent before, once per loss. The rebuild reads the records only after the others' write interval
        (`seed_wait_s`), so what this process settled up to here is in its sum and is not added again."""
        if self._written is not None or self.flush is None:
            return
        marks = {(a.key, a.start): a.spent for a in self.budgets.accounts()}  # their records are queued
        try:
            written = await asyncio.get_running_loop().run_in_executor(None, self.flush)
        except Exception:  # noqa: BLE001 - the database is down: the rebuild cannot read them either
            written = False
        # False: some went to the spool, not the database; then, as after a failure, nothing is known written
        # (tried once per loss: while the database is down the usage writer retries on its own)
        self._written = (self.clock(), marks) if written is not False else (math.inf, {})

    async def _reseed(self) -> None:
        """Rebuild every budget counter of an empty Redis from the usage records, then set a new marker.

        One process does it (a lock that expires, should it die). It first waits for the records
        other processes queued to be written (their writers flush every SWITCHBOARD_USAGE_FLUSH_S),
        writes its own, then reads the period's spend of every process's records. Meanwhile no
        lease is granted: each process spends at most the allowance it holds (docs/limits.md#reseed)."""
        lock, marker = self.prefix + "seeding", self.prefix + "epoch"
        try:
            if not await self._redis.set(lock, self.id, nx=True, ex=SEED_LOCK_S):
                return  # another process is rebuilding them
            if await self._redis.exists(marker):  # rebuilt meanwhile (this round's view was older)
                await self._redis.delete(lock)
                return
            wait = self.seed_wait_s
            if wait is None:
                from django.conf import settings

                wait = float(settings.SWITCHBOARD_USAGE_FLUSH_S) + 0.3
            await asyncio.sleep(wait)
            now = self.clock()
            wanted = self._budgets_to_seed()
            starts = {period_bounds(period, now)[0] for _, period in wanted.values()}
            marks = {(a.key, a.start): a.spent for a in self.budgets.accounts()}  # written by the read's flush
            prior, epoch = self._written, uuid.uuid4().hex
            try:
                loop = asyncio.get_running_loop()
                spend = await loop.run_in_executor(None, read_spend, starts, self.flush)
                self._written, epoch = (now, marks), f"{epoch}@{now!r}"  # when the records were read
                source = "the usage records"
            except Exception as exc:  # noqa: BLE001 - the database is down too: this process's last view
                spend = self._own_view(now)  # no records read: every process adds its spend since its last round
                source = f"this process's last view (the usage records could not be read: {exc})"
            keys, args = [lock, marker], [self.id, epoch]
            for key, (_usd, period) in wanted.items():
                start, end = period_bounds(period, now)
                ttl = int(end - now + 86400) if end is not None else 400 * 86400
                keys.append(f"{self.prefix}budget:{int(start)}:{'/'.join(key)}")
                args += [int(spend.get((key, start), 0.0) * _MICRO), max(ttl, 60)]
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
            wanted.update(budgeted(live.current()))
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


def seats_key(name: str, prefix: str = KEY_PREFIX) -> str:
    """The Redis hash of one deployment's concurrency seats (by its gate's ident: the breaker key's parts)."""
    return f"{prefix}seats:{name}"


def bucket_key(key: tuple[str, ...], prefix: str = KEY_PREFIX) -> str:
    """The Redis hash of one cluster bucket (org, agent or deployment; requests or tokens)."""
    return f"{prefix}bucket:{'/'.join(key)}"


def account_key(account: Account, prefix: str = KEY_PREFIX) -> str:
    """The Redis counter of one account's current period."""
    return f"{prefix}budget:{int(account.start)}:{'/'.join(account.key)}"


def namespace(database: dict[str, Any]) -> str:
    """The cluster's key namespace: processes on the same database share limits, others never do."""
    ident = f"{database.get('ENGINE')}|{database.get('HOST')}|{database.get('PORT')}|{database.get('NAME')}"
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


_syncer: Syncer | None = None


def install(syncer: Syncer | None) -> None:
    """The composition root's syncer (None: budgets are per process)."""
    global _syncer
    _syncer = syncer


def wake() -> bool:
    """Request path: a share was short; wake the syncer. False when none is installed (limits are per process).

    An installed syncer whose task has not begun yet (the first request of a daphne process
    spawns it) counts: `wait_round` lets it begin."""
    syncer = _syncer
    if syncer is None:
        return False
    syncer.starved()
    return True


async def wait_round(timeout_s: float) -> bool:
    """Request path, only when a share is short: wait for one background round."""
    syncer = _syncer
    return syncer is not None and await syncer.wait_round(timeout_s)


async def after_others_rounds(deadline: float) -> None:
    """Request path, only for a request a round refused: sleep 1.5 sync intervals (bounded by the
    monotonic `deadline`), by when every other active process has planned a round since."""
    syncer = _syncer
    if syncer is None:
        return
    delay = min(time.monotonic() + 1.5 * syncer.interval_s, deadline) - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def wait_for_lease(account: Account, timeout_s: float) -> bool:
    """Request path, only when a shared budget's lease is too small: True when a round ended (its lease
    may have grown: admit again); False when none can help (on an outage share) or none ended in time."""
    syncer = _syncer
    if syncer is not None and syncer.degraded and account.key in syncer._outage:
        return False  # on its outage share already: no round can give it more until Redis is back
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while await wait_round(max(0.0, end - loop.time())):
        if syncer is None or not syncer.reseeding or loop.time() >= end:
            return True
        # Redis lost the counters and one process is rebuilding them: no round grants anything
        # until it is done, so wait for it (bounded by the caller's deadline)
    return False
