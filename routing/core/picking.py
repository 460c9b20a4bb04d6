"""Choosing one deployment of a model for each try (docs/deployments.md#strategies).

Pure: randomness and the clock are injected. A `Target` is one deployment as the
executor sees it (its own `Link`, weight and capacity); `Picker` holds the live
figures per deployment, keyed by the deployment's breaker key (provider, model[, org]):
requests in flight, an EWMA of time to first byte, and the rpm/tpm token buckets.
Keys, not snapshot objects, so the figures survive configuration rebuilds.

Capacity (docs/deployments.md#capacity) counts in routing.core.buckets's buckets, the
type org and agent limits use: local `Bucket`s per process, or, once the composition
root hands the picker a lessor (`share`), `SharedBucket`s = this process's shares of
cluster buckets, leased in the background; the request path never does I/O for them.

Strategies, each over the *eligible* deployments only (not yet tried by this
request and with capacity left; the executor then asks the breaker):

- `weighted`: a weighted random draw, one uniform number over the cumulative weights,
  so each deployment's share converges to weight / sum of weights.
- `least_busy`: the fewest requests in flight in this process; ties broken at random.
- `latency`: power of two choices on the EWMA of time to first byte (alpha 0.3): draw
  two distinct deployments at random and take the faster; with probability
  `EXPLORE` (5 %) take a uniformly random one instead, so a slow deployment's figure
  keeps being refreshed. A deployment without a figure yet counts as fastest.

With affinity (docs/deployments.md#affinity; routing.core.affinity), `pick_pinned` goes to the
deployment the conversation is pinned to while it is eligible and its breaker closed, and
otherwise pins the conversation to the strategy's pick among the closed ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from routing.core.affinity import Pins
from routing.core.buckets import Bucket, Lessor, SharedBucket

WEIGHTED, LEAST_BUSY, LATENCY = "weighted", "least_busy", "latency"
EXPLORE = 0.05
ALPHA = 0.3
SHORT = -1.0  # room_s: only this process's share of the cluster bucket is short; a lease may bring it
DEPLOYMENT = "deployment"  # first part of a capacity bucket's cluster name (the lessor's key)


@dataclass(frozen=True, slots=True)
class Target:
    """One deployment of a model: `link` is the executor Link that calls it."""

    link: Any  # routing.core.executor.Link (not imported: the executor imports this module)
    weight: int = 1
    rpm: int | None = None
    tpm: int | None = None

    @property
    def key(self) -> Any:
        return self.link.breaker_key

    @property
    def name(self) -> str:
        return self.link.model.provider.name


class Figures:
    """The live figures of one deployment in this process."""

    __slots__ = ("in_flight", "ewma_s", "rpm", "tpm", "picked")

    def __init__(self) -> None:
        self.in_flight = 0
        self.ewma_s: float | None = None  # time to first byte, seconds
        self.rpm: Bucket | None = None
        self.tpm: Bucket | None = None
        self.picked = 0


class Picker:
    """Per-deployment figures and the strategies over them (one per process)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._figures: dict[Any, Figures] = {}
        self.lessor: Lessor | None = None  # keeps shared buckets' shares (None: capacity per process)
        self.pins = Pins()  # conversations pinned to a deployment (docs/deployments.md#affinity)

    def share(self, lessor: Lessor) -> None:
        """Count capacity in shares of cluster buckets that `lessor` keeps topped up (docs/limits.md#shared).

        Buckets made before are dropped so every bucket from now on is a share.
        """
        self.lessor = lessor
        for f in self._figures.values():
            f.rpm = f.tpm = None

    def figures(self, key: Any) -> Figures:
        f = self._figures.get(key)
        if f is None:
            f = self._figures[key] = Figures()
        return f

    def peek(self, key: Any) -> Figures | None:
        return self._figures.get(key)

    # capacity ----------------------------------------------------------------------

    def room_s(self, target: Target, tokens: int, now: float | None = None, hint: bool = True) -> float:
        """0 when the deployment can take a request of `tokens` now, else seconds until it can.

        `SHORT` (< 0) when only this process's share of a cluster bucket lacks it: with `hint`, the
        amount is added to what the lessor's next round asks for and the lessor is told (an event
        set), and a later round may bring the share (`lease`). Without, a question only.
        """
        if target.rpm is None and target.tpm is None:
            return 0.0
        if now is None:
            now = self.clock()
        f = self.figures(target.key)
        wait = 0.0
        short_rpm = short_tpm = False
        amount = 0.0
        if target.rpm is not None:
            bucket = f.rpm
            if bucket is None:
                bucket = f.rpm = self._bucket(target.rpm, now)
            if bucket.refill(now, target.rpm) < 1.0:
                if bucket.may_lease(1.0):
                    short_rpm = True
                else:
                    wait = bucket.wait(1.0)
        if target.tpm is not None:
            bucket = f.tpm
            if bucket is None:
                bucket = f.tpm = self._bucket(target.tpm, now)
            amount = min(float(max(tokens, 0)), float(target.tpm))
            if bucket.refill(now, target.tpm) < amount:
                if bucket.may_lease(amount):
                    short_tpm = True
                else:
                    wait = max(wait, bucket.wait(amount))
        if wait > 0:
            return wait
        if short_rpm or short_tpm:
            lessor = self.lessor
            if hint and lessor is not None:
                if short_rpm and f.rpm is not None:
                    f.rpm.short(1.0)
                if short_tpm and f.tpm is not None:
                    f.tpm.short(amount)
                lessor.starved()
            return SHORT
        return 0.0

    def _bucket(self, capacity: int, now: float) -> Bucket:
        return (Bucket if self.lessor is None else SharedBucket)(capacity, now)

    def take(self, target: Target, tokens: int) -> None:
        """Count one request (and its estimated tokens) against the deployment's capacity."""
        f = self.figures(target.key)
        f.picked += 1
        if f.rpm is not None and target.rpm is not None:
            f.rpm.level -= 1.0
        if f.tpm is not None and target.tpm is not None:
            f.tpm.level -= min(float(max(tokens, 0)), f.tpm.capacity)

    async def lease(self, timeout_s: float) -> bool:
        """Request path, only when every deployment left is `SHORT`: wait (bounded) for one lessor round."""
        lessor = self.lessor
        return lessor is not None and timeout_s > 0 and await lessor.wait_round(timeout_s)

    def buckets(self) -> list[tuple[tuple[str, ...], Bucket]]:
        """Every capacity bucket with its cluster name ("deployment", *key, "requests" | "tokens") (the lessor)."""
        out: list[tuple[tuple[str, ...], Bucket]] = []
        for key, f in list(self._figures.items()):
            if f.rpm is not None:
                out.append(((DEPLOYMENT, *key, "requests"), f.rpm))
            if f.tpm is not None:
                out.append(((DEPLOYMENT, *key, "tokens"), f.tpm))
        return out

    # live figures ------------------------------------------------------------------

    def started(self, key: Any) -> None:
        self.figures(key).in_flight += 1

    def finished(self, key: Any) -> None:
        f = self._figures.get(key)
        if f is not None and f.in_flight > 0:
            f.in_flight -= 1

    def observe(self, key: Any, seconds: float) -> None:
        """One time-to-first-byte sample (a success, or a timeout as the time it took)."""
        f = self.figures(key)
        f.ewma_s = seconds if f.ewma_s is None else f.ewma_s + ALPHA * (seconds - f.ewma_s)

    def retain(self, keys: set[Any]) -> None:
        """Forget deployments no longer configured (on a configuration rebuild)."""
        for key in [k for k in self._figures if k not in keys]:
            del self._figures[key]

    def clear(self) -> None:
        self._figures.clear()

    # selection ---------------------------------------------------------------------

    def pick(self, strategy: str, eligible: Sequence[Target], rand: Callable[[], float]) -> Target | None:
        """One of `eligible` by the strategy (None when empty)."""
        n = len(eligible)
        if n <= 1:
            return eligible[0] if n else None
        if strategy == LEAST_BUSY:
            return self._least_busy(eligible, rand)
        if strategy == LATENCY:
            return self._latency(eligible, rand)
        return pick_weighted(eligible, rand())

    def pick_pinned(
        self,
        link: Any,
        eligible: Sequence[Target],
        rand: Callable[[], float],
        key: str,
        closed: Callable[[Any], bool],
    ) -> Target | None:
        """The deployment `link`'s conversation `key` is pinned to when it is in `eligible` (not tried,
        not parked, with capacity) and `closed(its breaker key)`; else the strategy's pick among the
        eligible ones whose breaker is closed (all of them when none is), which becomes the pin.
        Without `affinity` on the model, the strategy's pick."""
        ttl = link.model.affinity_s
        if not ttl:
            return self.pick(link.routing, eligible, rand)
        model = link.model.id
        pins = self.pins
        now = self.clock()
        pinned = pins.get(model, key, now)
        if pinned is not None:
            for t in eligible:
                if t.key == pinned and closed(pinned):
                    return t
        target = self.pick(link.routing, [t for t in eligible if closed(t.key)] or eligible, rand)
        if target is not None:
            pins.put(model, key, target.key, ttl, now)
        return target

    def _least_busy(self, eligible: Sequence[Target], rand: Callable[[], float]) -> Target:
        n = len(eligible)
        start = int(rand() * n) % n  # ties: whichever comes first from a random start
        best, best_load = eligible[start], None
        figures = self._figures
        for i in range(n):
            t = eligible[(start + i) % n]
            f = figures.get(t.key)
            load = 0 if f is None else f.in_flight
            if best_load is None or load < best_load:
                best, best_load = t, load
        return best

    def _latency(self, eligible: Sequence[Target], rand: Callable[[], float]) -> Target:
        n = len(eligible)
        if rand() < EXPLORE:
            return eligible[int(rand() * n) % n]
        i = int(rand() * n) % n
        j = int(rand() * (n - 1)) % (n - 1)
        if j >= i:
            j += 1
        a, b = eligible[i], eligible[j]
        return a if self.latency_of(a.key) <= self.latency_of(b.key) else b

    def latency_of(self, key: Any) -> float:
        f = self._figures.get(key)
        return 0.0 if f is None or f.ewma_s is None else f.ewma_s


def pick_weighted(eligible: Sequence[Target], u: float) -> Target:
    """The deployment whose cumulative-weight interval holds u · total (0 ≤ u < 1)."""
    total = 0
    for t in eligible:
        total += t.weight
    point = u * total
    acc = 0
    for t in eligible:
        acc += t.weight
        if point < acc:
            return t
    return eligible[-1]
