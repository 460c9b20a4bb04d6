"""Per-key, per-agent and per-org rate limits as in-memory token buckets (docs/limits.md).

Pure: no Django, no Redis, no database; the clock is injected. One `Limiter` per
serving process holds a bucket per (org) and per (org, agent) for requests (`rpm`)
and for tokens (`tpm`). A bucket holds at most its per-minute amount (the burst)
and refills continuously at that amount per 60 s. Buckets are keyed by name, not
by snapshot object, so they survive snapshot rebuilds; a changed limit applies from
the next request (the level is kept, capped at the new capacity).

Admission checks every bucket that applies before taking from any, so a refused
request takes nothing. Tokens are reserved at admission (prompt estimate + the
output allowance) and corrected once the real usage is known (`Ticket.settle`).

The buckets are routing.core.buckets's, the same type deployment capacity counts in.
Shared mode (docs/limits.md#shared): they are `SharedBucket`s whose level is this
process's share of a cluster-wide bucket, leased by a background task
(routing.runtime.shared_limits); they do not refill locally unless Redis is down.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from routing.core.buckets import Bucket, SharedBucket

REQUESTS, TOKENS = "requests", "tokens"
ORG, AGENT, KEY = "org", "agent", "key"


class Refused(Exception):
    """Admission refused: which scope and limit, the limit, the wait, and the ticket for headers."""

    def __init__(
        self,
        scope: str,
        limit: str,
        value: int,
        amount: int,
        retry_after_s: float,
        ticket: Ticket,
        bucket: Bucket | None = None,
        short: bool = False,
    ) -> None:
        super().__init__(f"{scope} {limit} limit {value}")
        self.scope = scope
        self.limit = limit
        self.value = value
        self.amount = amount
        self.retry_after_s = retry_after_s
        self.ticket = ticket
        self.bucket = bucket  # the bucket that refused
        # Only leased shares lacked it, and the cluster buckets had room when last seen: the request
        # may wait for the lessor's rounds (its amounts are in their `need`), docs/limits.md#shared.
        self.short = short
        # Shared buckets that lack it even with their cluster bucket as last seen, with the amounts: a
        # request refused after a round may ask once more, after the others' rounds (admit_after_lease).
        self.lacking: list[tuple[SharedBucket, float]] = []


class Ticket:
    """What one admitted request took, to correct it later and to build its headers."""

    __slots__ = ("requests", "tokens", "reserved", "settled")

    def __init__(self, requests: list[Bucket], tokens: list[Bucket], reserved: int) -> None:
        self.requests = requests
        self.tokens = tokens
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
        if used is None or not self.tokens:
            return
        diff = used - self.reserved
        for bucket in self.tokens:
            level = bucket.level - diff  # a refund when negative; a charge may go into debt
            bucket.level = bucket.capacity if level > bucket.capacity else level

    def refund(self) -> None:
        """Give the whole token reservation back: no upstream produced an answer (error, cancel)."""
        self.settle(0)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The x-ratelimit-* headers of the tightest bucket of each kind (docs/limits.md#headers)."""
        out: list[tuple[bytes, bytes]] = []
        for names, buckets in ((_REQUEST_HEADERS, self.requests), (_TOKEN_HEADERS, self.tokens)):
            if not buckets:
                continue
            tight = buckets[0]
            level = tight.remaining()
            for other in buckets[1:]:
                other_level = other.remaining()
                if other_level < level:
                    tight, level = other, other_level
            limit, remaining, reset = names
            left = int(level) if level > 0 else 0
            out.append((limit, b"%d" % tight.capacity))
            out.append((remaining, b"%d" % left))
            out.append((reset, format_duration(tight.reset_s()).encode()))
        return out


_REQUEST_HEADERS = (b"x-ratelimit-limit-requests", b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests")
_TOKEN_HEADERS = (b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens")


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
        self.shared = False  # new buckets are shares of cluster buckets (routing.runtime.shared_limits)

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
        org_limits: tuple[int | None, int | None] | None,
        agent: str,
        agent_limits: tuple[int | None, int | None] | None,
        tokens: Callable[[], int],
        key: str = "",
        key_limits: tuple[int | None, int | None] | None = None,
    ) -> Ticket:
        """Take one request and `tokens()` tokens from every bucket that applies, or raise `Refused`.

        `*_limits` are (rpm, tpm) or None; `tokens` is called only when a tpm limit applies. `key` is
        the API key's prefix, its identity across rotations (docs/limits.md#keys).
        """
        now = self._clock()
        requests: list[Bucket] = []
        token_buckets: list[Bucket] = []
        scopes: list[tuple[str, str, int, Bucket]] = []
        applies = ((AGENT, (AGENT, org, agent), agent_limits), (ORG, (ORG, org), org_limits))
        if key_limits is not None:
            applies = ((KEY, (KEY, key), key_limits), *applies)
        for scope, ident, limits in applies:
            if limits is None:
                continue
            rpm, tpm = limits
            if rpm is not None:
                bucket = self._bucket((*ident, REQUESTS), rpm, now)
                requests.append(bucket)
                scopes.append((scope, REQUESTS, rpm, bucket))
            if tpm is not None:
                bucket = self._bucket((*ident, TOKENS), tpm, now)
                token_buckets.append(bucket)
                scopes.append((scope, TOKENS, tpm, bucket))
        amount = tokens() if token_buckets else 0
        ticket = Ticket(requests, token_buckets, amount)
        for _, limit, _, bucket in scopes:
            need = 1 if limit == REQUESTS else amount
            if bucket.level < need or need > bucket.capacity:
                ticket.settled = True
                raise _refusal(scopes, amount, ticket)
        for bucket in requests:
            bucket.level -= 1
        for bucket in token_buckets:
            bucket.level -= amount
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


def _refusal(scopes: list[tuple[str, str, int, Bucket]], amount: int, ticket: Ticket) -> Refused:
    """Why a request is refused: the first bucket that cannot take it, not even with a lease from
    its cluster bucket; else (only leased shares are short) a `short` refusal, each short share
    having added this request's amount to what the lessor's next round asks for (so one round
    leases for every waiter, on the agent's and the org's rpm and tpm at once)."""
    short: tuple[str, str, int, int, Bucket] | None = None
    for scope, limit, value, bucket in scopes:
        need = 1 if limit == REQUESTS else amount
        if bucket.level >= need and need <= bucket.capacity:
            continue
        if not bucket.may_lease(need):
            refused = Refused(scope, limit, value, need, bucket.wait(need), ticket, bucket)
            for _, kind, _, other in scopes:
                amount_of = 1 if kind == REQUESTS else amount
                if isinstance(other, SharedBucket) and not other.divisor and other.level < amount_of <= other.capacity:
                    refused.lacking.append((other, amount_of))
            return refused
        if short is None:
            short = (scope, limit, value, need, bucket)
    assert short is not None
    for _, limit, _, bucket in scopes:
        need = 1 if limit == REQUESTS else amount
        if bucket.level < need:
            bucket.short(need)
    scope, limit, value, need, bucket = short
    return Refused(scope, limit, value, need, bucket.wait(need), ticket, bucket, short=True)
