"""Per-key, per-agent and per-org rate limits as in-memory token buckets (docs/limits.md).

Pure: no Django, no Redis, no database; the clock is injected. One `Limiter` per
serving process holds a bucket per (org) and per (org, agent) for requests (`rpm`)
and for tokens (`tpm`). A bucket holds at most its per-minute amount (the burst)
and refills continuously at that amount per 60 s. Buckets are keyed by name, not
by snapshot object, so they survive snapshot rebuilds; a changed limit applies from
the next request (the level is kept, capped at the new capacity).

Admission checks every bucket that applies before taking from any, so a refused
request takes nothing. Tokens are reserved at admission (prompt estimate + the
output allowance) and corrected once the real usage is known (`LimitTicket.settle`).

The buckets are routing.core.buckets's, the same type deployment capacity counts in.
Shared mode (docs/limits.md#shared): they are `SharedBucket`s whose level is this
process's share of a cluster-wide bucket, leased by a background task
(routing.runtime.cluster.shared_limits); they do not refill locally unless Redis is down.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from routing.core.buckets import Bucket, SharedBucket
from routing.core.dimensions import LIMIT_DIMENSIONS, Dimension, Limits

ORG, AGENT, KEY = "org", "agent", "key"


class Refused(Exception):
    """Admission refused: which scope and limit, the limit, the wait (the refusing bucket's for
    `amount`), and the ticket for headers."""

    def __init__(
        self, scope: str, limit: str, value: int, amount: int, ticket: LimitTicket, bucket: Bucket, short: bool = False
    ) -> None:
        super().__init__(f"{scope} {limit} limit {value}")
        self.scope = scope
        self.limit = limit
        self.value = value
        self.amount = amount
        self.retry_after_s = bucket.wait(amount)
        self.ticket = ticket
        self.bucket = bucket  # the bucket that refused
        # Only leased shares lacked it, and the cluster buckets had room when last seen: the request
        # may wait for the lessor's rounds (its amounts are in their `need`), docs/limits.md#shared.
        self.short = short
        # Shared buckets that lack it even with their cluster bucket as last seen, with the amounts: a
        # request refused after a round may ask once more, after the others' rounds (admit_after_lease).
        self.lacking: list[tuple[SharedBucket, float]] = []


class LimitTicket:
    """What one admitted request took, to correct it later and to build its headers."""

    __slots__ = ("buckets", "reserved", "settled")

    def __init__(self, buckets: list[list[Bucket]], reserved: int) -> None:
        self.buckets = buckets  # the buckets taken from, one list per row of LIMIT_DIMENSIONS
        self.reserved = reserved
        self.settled = False

    def settle(self, used: int | None) -> None:
        """Correct the token reservation with the real usage (once).

        `used` = the real prompt + completion tokens; None = unknown, in which case
        the reservation stands (an answer was produced; it cost something).
        """
        if self.settled:
            return
        self.settled = True
        if used is None:
            return
        diff = used - self.reserved
        for dimension, taken in zip(LIMIT_DIMENSIONS, self.buckets, strict=True):
            if not dimension.per_token:
                continue
            for bucket in taken:
                level = bucket.level - diff  # a refund when negative; a charge may go into debt
                bucket.level = bucket.capacity if level > bucket.capacity else level

    def refund(self) -> None:
        """Give the whole token reservation back: no upstream produced an answer (error, cancel)."""
        self.settle(0)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The x-ratelimit-* headers of the tightest bucket of each dimension (docs/limits.md#headers)."""
        out: list[tuple[bytes, bytes]] = []
        for dimension, buckets in zip(LIMIT_DIMENSIONS, self.buckets, strict=True):
            if not buckets:
                continue
            tight = buckets[0]
            level = tight.remaining()
            for other in buckets[1:]:
                other_level = other.remaining()
                if other_level < level:
                    tight, level = other, other_level
            limit, remaining, reset = dimension.headers
            left = int(level) if level > 0 else 0
            out.append((limit, b"%d" % tight.capacity))
            out.append((remaining, b"%d" % left))
            out.append((reset, format_duration(tight.reset_s()).encode()))
        return out


def format_duration(seconds: float) -> str:
    """OpenAI's reset format: "20ms", "1s", "1.5s", "6m0s"."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


class Limiter:
    """The process's buckets, keyed by org name and (org, agent) name."""

    __slots__ = ("_clock", "_buckets", "shared")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, ...], Bucket] = {}
        self.shared = False  # new buckets are shares of cluster buckets (routing.runtime.cluster.shared_limits)

    def _bucket(self, key: tuple[str, ...], capacity: int, now: float) -> Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = (SharedBucket if self.shared else Bucket)(capacity, now)
        else:
            bucket.refill(now, capacity)
        return bucket

    def admit(
        self,
        org: str,
        org_limits: Limits | None,
        agent: str,
        agent_limits: Limits | None,
        tokens: Callable[[], int],
        key: str = "",
        key_limits: Limits | None = None,
    ) -> LimitTicket:
        """Take one request and `tokens()` tokens from every bucket that applies, or raise `Refused`.

        `*_limits` are `Limits` (one value per LIMIT_DIMENSIONS row) or None; `tokens` is called only
        when a per-token limit applies. `key` is the API key's prefix, its identity across rotations
        (docs/limits.md#keys).
        """
        now = self._clock()
        taken: list[list[Bucket]] = [[] for _ in LIMIT_DIMENSIONS]
        scopes: list[tuple[str, Dimension, int, Bucket]] = []
        per_token = False
        applies = ((AGENT, (AGENT, org, agent), agent_limits), (ORG, (ORG, org), org_limits))
        if key_limits is not None:
            applies = ((KEY, (KEY, key), key_limits), *applies)
        for scope, ident, limits in applies:
            if limits is None:
                continue
            for dimension, value, buckets in zip(LIMIT_DIMENSIONS, limits, taken, strict=True):
                if value is not None:
                    bucket = self._bucket((*ident, dimension.name), value, now)
                    buckets.append(bucket)
                    scopes.append((scope, dimension, value, bucket))
                    per_token = per_token or dimension.per_token
        amount = tokens() if per_token else 0
        ticket = LimitTicket(taken, amount)
        for _, dimension, _, bucket in scopes:
            need = amount if dimension.per_token else 1
            if bucket.level < need or need > bucket.capacity:
                ticket.settled = True
                raise _refusal(scopes, amount, ticket)
        for dimension, buckets in zip(LIMIT_DIMENSIONS, taken, strict=True):
            need = amount if dimension.per_token else 1
            for bucket in buckets:
                bucket.level -= need
        return ticket

    def peek(self, key: tuple[str, ...]) -> tuple[float, float, float] | None:
        """(capacity, remaining, seconds to full) of a bucket as of now, without touching it (the dashboard)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        remaining = bucket.remaining()
        if not isinstance(bucket, SharedBucket):
            remaining = min(bucket.capacity, remaining + (self._clock() - bucket.stamp) * bucket.rate)
        missing = bucket.capacity - remaining
        return bucket.capacity, remaining, missing / bucket.rate if missing > 0 else 0.0

    def items(self) -> list[tuple[tuple[str, ...], Bucket]]:
        """Every bucket with its key (the shared-limits syncer)."""
        return list(self._buckets.items())

    def forget(self) -> None:
        """Drop every bucket (tests)."""
        self._buckets.clear()


def _refusal(scopes: list[tuple[str, Dimension, int, Bucket]], amount: int, ticket: LimitTicket) -> Refused:
    """Why a request is refused: the first bucket that cannot take it, not even with a lease from
    its cluster bucket; else (only leased shares are short) a `short` refusal, each short share
    having added this request's amount to what the lessor's next round asks for (so one round
    leases for every waiter, on the agent's and the org's rpm and tpm at once)."""
    short: tuple[str, str, int, int, Bucket] | None = None
    for scope, dimension, value, bucket in scopes:
        need = amount if dimension.per_token else 1
        if bucket.level >= need and need <= bucket.capacity:
            continue
        if not bucket.may_lease(need):
            refused = Refused(scope, dimension.name, value, need, ticket, bucket)
            for _, other_dimension, _, other in scopes:
                amount_of = amount if other_dimension.per_token else 1
                if isinstance(other, SharedBucket) and not other.divisor and other.level < amount_of <= other.capacity:
                    refused.lacking.append((other, amount_of))
            return refused
        if short is None:
            short = (scope, dimension.name, value, need, bucket)
    assert short is not None
    for _, dimension, _, bucket in scopes:
        need = amount if dimension.per_token else 1
        if bucket.level < need:
            bucket.short(need)
    scope, limit, value, need, bucket = short
    return Refused(scope, limit, value, need, ticket, bucket, short=True)
