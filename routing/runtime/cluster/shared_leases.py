"""The Redis lease protocol: limits, budgets and deployments' capacity shared by the serving processes
(docs/limits.md#shared).

Every budget has a counter in Redis per period = the cluster's settled spend + the allowance
leased out to processes. Each process leases a small share ahead of use (a Lua script that
never grants past the budget), reserves from it locally, tells the counter what it spent
beyond the lease, and gives back what it holds when idle. Rate limits and deployments'
rpm/tpm capacity (routing.core.picking) are leased the same way, from cluster token buckets.
One `Syncer` per process (`Process.syncer`, with REDIS_URL) runs one pipelined round per
interval for every active one, with the concurrency seats of routing.runtime.cluster.shared_seats
in the same round. Redis unreachable → each process carries on with an even share of what was
left (÷ the processes seen alive), says so once (log line, `switchboard_degraded{component="redis"}`),
and re-syncs by itself (routing.runtime.cluster.shared_recovery, which also rebuilds the counters of a
Redis that lost its data). The scripts and key names are routing.runtime.cluster.shared_scripts'.
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
from routing.core.budget_accounts import NEW, Account, Budgets
from routing.core.limiter import Limiter, SharedBucket
from routing.core.picking import Picker
from routing.runtime.cluster.shared_recovery import REBUILD_SCRIPT, RELEASE_SCRIPT, Recovery
from routing.runtime.cluster.shared_scripts import (
    BUCKET_SCRIPT,
    BUCKET_TTL_S,
    KEY_PREFIX,
    LEASE_SCRIPT,
    PROCESS_TTL_S,
    account_key,
    bucket_key,
    settled_key,
)
from routing.runtime.cluster.shared_seats import BEAT_S, SEATS_SCRIPT, SEATS_TTL_S, Seating, refusals_key, seats_key
from routing.runtime.observe import metrics

log = logging.getLogger("switchboard")

_MICRO = 1_000_000
LEASE_FRACTION = 0.05  # a lease is at least this share of the budget (or one request's worst case)
IDLE_S = 2.0  # a lease unused this long is given back


class Syncer(Seating, Recovery):
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
        picker: Picker | None = None,
        flush: Callable[[], Any] | None = None,
        seed_wait_s: float | None = None,
        gates: Gates | None = None,
    ) -> None:
        self.prefix = f"{KEY_PREFIX}{namespace}:" if namespace else KEY_PREFIX
        self.budgets = budgets
        self.limiter = limiter
        self.picker = picker  # deployments' rpm/tpm capacity (docs/deployments.md#capacity), same buckets
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
        # how long a rebuild waits at most (on `clock`) for the other processes to report the records they
        # queued before the loss written (None: SEED_WAIT_S); their reports end the wait at once
        self.seed_wait_s = seed_wait_s
        self.peers = 0  # the processes counted by the last round before a loss: a rebuild waits for their reports
        self._seeder: asyncio.Task | None = None
        # Since Redis lost the counters: when this process's records were last all written (wall clock), and
        # what each account (key, period start) had spent by then; None until it notices (`_note_written`)
        self._written: tuple[float, dict[tuple[tuple[str, ...], float], float]] | None = None
        budgets.shared = True
        budgets.starved = self.starved
        limiter.shared = True
        if picker is not None:
            picker.share(self)
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

    @staticmethod
    def _plan_settled(account: Account) -> tuple[int, int]:
        """(delta, seed) in µUSD for the account's settled-spend counter: what this process settled since it
        last told it (rounded; the rest waits for the next round), and its view of the settled spend, which
        seeds a counter Redis does not have (docs/alerts.md#events)."""
        return round((account.spent - account.reported) * _MICRO), round((account.base + account.spent) * _MICRO)

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
        if (
            not accounts
            and not buckets
            and not self.degraded
            and not self._beat_due(mono)
            and not self._watch_due(mono)
        ):
            return False  # nothing to share now: no Redis traffic (while degraded, the heartbeat tells when it is back)
        self._beat_at = mono
        # a re-run right after adopting rebuilt counters only redoes what they refused: no share ahead,
        # which a round with waiters never takes (docs/limits.md#shared)
        account_plans = [
            (a, a.start, *self._plan_account(a, now, not budgets_only), *self._plan_settled(a))
            for a in accounts
            if a.state != NEW
        ]
        bucket_plans = [(b, *self._plan_bucket(b, mono)) for _, b in buckets]
        seat_plans = [] if budgets_only or self.gates is None or not self.gates.on else self.gates.claims()
        try:
            results = await self._send(now, account_plans, buckets, bucket_plans, seat_plans)
        except Exception as exc:  # noqa: BLE001 - Redis down: fail open on local shares
            for account, start, want, *_ in account_plans:
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

    def _watch_due(self, mono: float) -> bool:
        """A process in the cluster's list with nothing to share still looks once every BEAT_S: it notices a
        Redis that lost the counters within a second, and reports its records written to their rebuild
        (docs/limits.md#reseed), which would otherwise wait its bound for it."""
        return self._counted and mono - self._beat_at >= BEAT_S

    def _due(self, now: float, mono: float, budgets_only: bool) -> tuple[list[Account], list[tuple[Any, SharedBucket]]]:
        """The budgets and buckets this round syncs."""
        # Idle ones holding nothing and owing nothing cost no Redis call (removed limits, quiet callers).
        accounts = [
            a
            for a in self.budgets.accounts()
            if a.lease is not None and (a.lease or a.owed or now - a.used_at <= IDLE_S or _unreported(a))
        ]
        items = self.limiter.items()
        if self.picker is not None:
            items += self.picker.buckets()
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
        seat_plans: list[tuple[str, int, int, int, int, int]],
    ) -> Any:
        """The round's pipeline: heartbeat, epoch, one lease per budget, one take per bucket, seats per gate."""
        pipe = self._redis.pipeline(transaction=False)
        processes = self.prefix + "processes"
        pipe.zadd(processes, {self.id: now})
        pipe.zremrangebyscore(processes, 0, now - PROCESS_TTL_S)
        pipe.zcard(processes)
        pipe.get(self.prefix + "epoch")
        for account, _start, want, owed, seed, paid, paid_seed in account_plans:
            ttl = int((account.end - now) + 86400) if account.end is not None else 400 * 86400
            args = [int(account.usd * _MICRO), want, owed, seed, max(ttl, 60), self.epoch or "", int(account.floor)]
            args += [paid, paid_seed]
            keys = [account_key(account, self.prefix), self.prefix + "epoch", settled_key(account, self.prefix)]
            await self._lease(keys=keys, args=args, client=pipe)
        mono = time.monotonic()
        for (key, bucket), (_, want, owed) in zip(buckets, bucket_plans, strict=True):
            args = [repr(bucket.capacity), repr(want), repr(owed), BUCKET_TTL_S, repr(bucket.seen_at(mono))]
            await self._take(keys=[bucket_key(key, self.prefix)], args=args, client=pipe)
        for name, total, demand, inflight, refused, waiting in seat_plans:
            args = [self.id, inflight, demand, total, SEATS_TTL_S, refused, waiting]
            keys = [seats_key(name, self.prefix), processes, refusals_key(name, self.prefix)]
            await self._seats(keys=keys, args=args, client=pipe)
        return await asyncio.wait_for(pipe.execute(), self.timeout_s * 2)

    def _apply(self, account_plans: list[Any], bucket_plans: list[Any], rest: list[Any], mono: float) -> None:
        """What the counters granted: leases and spend for the budgets, shares and pools for the buckets."""
        for plan, result in zip(account_plans, rest, strict=False):
            account, start, want, owed = plan[:4]
            grant, counter = result[:2]
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
            if len(result) > 2:  # the settled counter now holds what this round told it
                account.reported += plan[5] / _MICRO
                account.settled = int(result[2]) / _MICRO
        for (bucket, _want, _owed), (grant, pool) in zip(bucket_plans, rest[len(account_plans) :], strict=True):
            granted = max(0.0, float(grant))
            if bucket.divisor:  # back from a local share: what it held was never the cluster's
                bucket.level, bucket.divisor = granted, 0
            else:
                bucket.level += granted
            bucket.pool = float(pool)
            bucket.pool_at = mono


def _unreported(account: Account) -> bool:
    """The account settled spend its settled counter has not been told (at least half a µUSD)."""
    return abs(account.spent - account.reported) * _MICRO >= 0.5
