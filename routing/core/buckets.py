"""Token buckets, local or leased from a cluster bucket: the one bucket type of rate limits and capacity.

Pure: no Django, no Redis; the clock is the caller's. Org and agent limits
(routing.core.limiter, docs/limits.md) and deployment capacity (routing.core.picking,
docs/deployments.md#capacity) both count in these.

- `Bucket`: in memory, per process. Holds at most `capacity` (the per-minute figure,
  which is also the burst) and refills continuously at capacity per 60 s.
- `SharedBucket`: this process's *share* of a cluster-wide bucket (docs/limits.md#shared).
  Its `level` is what a background task leased from the cluster bucket and the process has
  not used yet; it does not refill here. The request path takes from it exactly as from a
  `Bucket` (a few float operations); the lessor (routing.runtime.cluster.shared_limits.Syncer) tops it
  up, gives idle shares back, and on a Redis outage sets `divisor` so it refills locally
  as an even share of the limit.

A request a share cannot cover while the cluster bucket may still have room (`short`)
adds what it needs to the share's `need` (the waiters' summed need, which the lessor's next
round asks the cluster bucket for, in one batched round), tells the lessor (`Lessor.starved`,
an event set, no I/O) and waits for its rounds (`Lessor.wait_round`), as many as it takes
within `LEASE_WAIT_S`: it is refused only once a round has seen the cluster bucket lack it.
"""

from __future__ import annotations

from typing import Protocol

_PER_S = 1.0 / 60.0

# How long a request waits for the lessor's next round when only its share is short, before it
# is refused or moves on (docs/limits.md#shared). Longer than two rounds can take (each bounded
# by twice the syncer's Redis timeout), so a slow or dead Redis ends in the fail-open share.
LEASE_WAIT_S = 2.5


class Bucket:
    """A token bucket of `capacity`, refilled at capacity per minute, continuously."""

    __slots__ = ("capacity", "rate", "level", "stamp")

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = float(capacity)
        self.rate = capacity * _PER_S
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float, capacity: int) -> float:
        """Bring the level up to `now` (and to a changed `capacity`); returns the level."""
        if capacity != self.capacity:
            self.capacity = float(capacity)
            self.rate = capacity * _PER_S
        level = self.level + (now - self.stamp) * self.rate
        self.stamp = now
        if level > self.capacity:
            level = self.capacity
        self.level = level
        return level

    def wait(self, amount: float) -> float:
        """Seconds until `amount` is available (after a refill); the whole refill time if it never fits."""
        need = min(amount, self.capacity) - self.level
        return need / self.rate if need > 0 else 0.0

    def reset_s(self) -> float:
        """Seconds until the bucket is full again (OpenAI's `x-ratelimit-reset-*`)."""
        missing = self.capacity - self.level
        return missing / self.rate if missing > 0 else 0.0

    def remaining(self) -> float:
        """What is left for the caller (the headers' `remaining`)."""
        return self.level

    def may_lease(self, amount: float) -> bool:
        """True when only this process's share lacks `amount` and a lease may bring it (never for a local bucket)."""
        return False

    def short(self, amount: float) -> bool:
        """`may_lease`, noting `amount` for the lessor (never for a local bucket)."""
        return False


class SharedBucket(Bucket):
    """This process's share of a cluster-wide bucket (docs/limits.md#shared).

    `level` is the share: tokens leased from the cluster bucket and not yet used. It
    is topped up and given back by the background lessor, never refilled here, except
    while Redis is unreachable (`divisor` > 0): then it refills at rate ÷ divisor up to
    capacity ÷ divisor, an even share of the limit per live process.

    `pool` is the cluster bucket's level as the lessor's last round left it (at `pool_at`),
    refilled here at the bucket's rate for the headers and the short-or-empty decision,
    until the next round says what it really is.
    """

    __slots__ = ("pool", "pool_at", "used_at", "need", "peak", "divisor")

    def __init__(self, capacity: int, now: float) -> None:
        super().__init__(capacity, now)
        self.level = 0.0
        self.pool = float(capacity)  # the cluster bucket's level as last seen (a new one is full)
        self.pool_at = now
        self.used_at = now
        self.need = 0.0  # the summed amounts of the requests waiting for the next round (the lessor's ask)
        self.peak = 1.0  # the largest amount one request needed: a share ahead of use holds one
        self.divisor = 0  # > 0 while Redis is unreachable: the processes sharing the limit

    def refill(self, now: float, capacity: int) -> float:
        if capacity != self.capacity:
            self.capacity = float(capacity)
            self.rate = capacity * _PER_S
        self.used_at = now
        if self.divisor:
            share = self.capacity / self.divisor
            if self.level < share:
                level = self.level + (now - self.stamp) * self.rate / self.divisor
                self.level = share if level > share else level
        self.stamp = now
        return self.level

    def cluster_level(self) -> float:
        """The cluster bucket's level as of the last refill: the last round's figure, refilled since."""
        since = self.stamp - self.pool_at
        pool = self.pool + since * self.rate if since > 0 else self.pool
        if pool > self.capacity:
            return self.capacity
        return pool if pool > 0 else 0.0

    def seen_at(self, now: float) -> float:
        """The cluster bucket's level at `now` as this process last saw it (refilled since, to its capacity):
        what a cluster bucket Redis lost is rebuilt at (docs/limits.md#reseed), never full again at once."""
        since = now - self.pool_at
        pool = self.pool + since * self.rate if since > 0 else self.pool
        return min(pool, self.capacity)

    def remaining(self) -> float:
        return self.level if self.divisor else self.level + self.cluster_level()

    def wait(self, amount: float) -> float:
        need = min(amount, self.capacity) - self.remaining()
        return need / self.rate if need > 0 else 0.0

    def reset_s(self) -> float:
        missing = self.capacity - self.remaining()
        return missing / self.rate if missing > 0 else 0.0

    def may_lease(self, amount: float) -> bool:
        """The share lacks `amount` but the cluster bucket had it (as last seen) and Redis answers."""
        return not self.divisor and self.level < amount <= self.capacity and self.wait(amount) <= 0

    def short(self, amount: float) -> bool:
        """`may_lease`, and then the amount is added to what the lessor's next round asks for."""
        if not self.may_lease(amount):
            return False
        self.need += amount
        if amount > self.peak:
            self.peak = amount
        return True


class Lessor(Protocol):
    """What keeps shared buckets' shares topped up (routing.runtime.cluster.shared_limits.Syncer)."""

    def starved(self) -> None:
        """A share was short: run a round soon (request path: sets an event, no I/O)."""

    async def wait_round(self, timeout_s: float) -> bool:
        """Wait for the next round to end (one that plans after this call); False when none ended
        within `timeout_s` (or none runs)."""
