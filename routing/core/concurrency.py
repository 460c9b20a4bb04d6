"""Adaptive concurrency limit of one deployment (docs/overload.md#adaptive-concurrency).

AIMD on explicit and latency signals. Growth: every good sample whose latency stays within
`tolerance` x the baseline adds step/limit (about +step per round-trip); the step doubles
each round-trip without a refusal (1, 2, 4... like TCP's slow start), and after a refusal
the limit holds for HOLD_S, then probes again from a step of 1. Up to just past the level
of the last refusal, the limit grows only while it is full (each step is then a real probe,
answered at once) and by one call per round-trip, so probing above a hard capacity costs
about one refused call per HOLD_S; past it, the step doubles again, so a capacity that
comes back is found within HOLD_S plus a few round-trips. Each 429 or timeout takes 1 off the limit (a
probe past the capacity is refused at most its growth step times); more refusals in one
round-trip than the step explains mean the capacity itself fell, and the limit drops at
once to half of what it was at the round-trip's start (never lower within that
round-trip), instead of 1 per refused call: each of those would be one more 429 a client sees. A latency past the tolerance multiplies the limit by
`backoff`, at most once per recent round-trip. The baseline is a slow average of latencies seen while the
upstream was healthy (time to first token for streams), so LLM answers of varying
length do not look like congestion by themselves. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_S = 1.2  # no growth for this long after a refusal: about one probe (and one refused call) per 1.3 s


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """Operator's settings of one deployment's limit (off unless configured)."""

    initial: int = 20
    min_limit: int = 1
    max_limit: int = 1000
    backoff: float = 0.9
    tolerance: float = 2.0
    queue: int = 1000  # waiting requests beyond which the lowest class is shed at once


class AdaptiveLimit:
    """The limit and its signals; `limit` is what the gate admits in flight."""

    __slots__ = (
        "settings",
        "_limit",
        "baseline",
        "recent",
        "_last_cut",
        "_floor_at",
        "_floor",
        "_refusals",
        "_room",
        "_ceiling",
        "_hold_until",
        "_step",
        "_step_at",
        "refused",
    )

    def __init__(self, settings: LimitSettings) -> None:
        self.settings = settings
        self._limit = float(max(settings.min_limit, min(settings.initial, settings.max_limit)))
        self.baseline = 0.0  # slow average of healthy latencies; 0 until the first sample
        self.recent = 0.0  # fast average: about one round-trip
        self._last_cut = -1e18
        self._floor_at = -1e18  # when this round-trip's floor for refusals was set
        self._floor = 0.0  # half the limit at the start of the round-trip
        self._refusals = 0  # refusals in this round-trip
        self._room = 1  # refusals a probe could explain in this round-trip (its growth step)
        self._ceiling = float("inf")  # the limit the last refusal came at: probed past one call at a time
        self._hold_until = -1e18  # no growth before this (after a refusal)
        self._step = 0.5  # growth per round-trip (doubled to 1 by the first sample)
        self._step_at = -1e18  # when the step last doubled
        self.refused = 0  # refusals seen here, ever: the other processes hold their growth on news of one

    @property
    def limit(self) -> int:
        return int(self._limit)

    def reconfigure(self, settings: LimitSettings) -> None:
        """New bounds from the operator: the learnt limit is kept, clamped into them."""
        self.settings = settings
        self._limit = float(max(settings.min_limit, min(self._limit, settings.max_limit)))

    def rescale(self, settings: LimitSettings, learnt: bool = False) -> None:
        """This process's share of the cluster's `max` changed (docs/overload.md#processes): what was learnt
        keeps its ratio to the share (a limit at its whole share of 1 seat is at its whole share of 20),
        the level of the last refusal too; a limit that has seen no call yet, or had no seat, starts at `initial`.

        `learnt`: the share moved with the processes' demand (the seats), not their number. The seats are a
        ceiling then, never a target: the limit is kept within them and grows by probing, as before. Scaled
        with them, two processes' limits followed each other's queues instead of the upstream (a limit held
        at a share of 4 seats while the other process's demand came first jumped to 20 when it got 20, and
        20 calls at once met a capacity of 10: 77 refusals in a tenth of a second), and drifted apart (one
        serving batch while the other's interactive requests waited)."""
        old = self.settings.max_limit
        self.settings = settings
        if self.baseline == 0 or old <= 0:
            self._limit = float(max(settings.min_limit, min(settings.initial, settings.max_limit)))
            return
        if learnt:
            self._limit = float(max(settings.min_limit, min(self._limit, settings.max_limit)))
            return
        factor = settings.max_limit / old
        self._limit = float(max(settings.min_limit, min(self._limit * factor, settings.max_limit)))
        if self._ceiling != float("inf"):
            self._ceiling *= factor

    def sample(self, latency_s: float, inflight: int, now: float) -> None:
        """A call answered (first token for a stream) after `latency_s` with `inflight` calls out."""
        s = self.settings
        self.recent = latency_s if self.recent == 0 else 0.7 * self.recent + 0.3 * latency_s
        if self.baseline == 0:
            self.baseline = latency_s
        if latency_s > s.tolerance * self.baseline and self.recent > s.tolerance * self.baseline:
            self._cut(now)
            self.baseline = 0.99 * self.baseline + 0.01 * latency_s  # drift up slowly: a new normal
            return
        self.baseline = 0.95 * self.baseline + 0.05 * latency_s
        # only grow a limit that is used; near or past the last refusal, only one that is full (a real probe)
        used = inflight >= int(self._limit) if self._limit >= self._ceiling - 1 else inflight * 2 >= self._limit
        if used and now >= self._hold_until:
            if now - self._step_at >= max(self.recent, 0.01):  # a round-trip without a refusal
                self._step = min(self._step * 2, max(1.0, self._limit / 4))
                if self._limit < self._ceiling + 1:  # up to just past the last refusal: no overshoot
                    self._step = min(self._step, max(1.0, self._ceiling - self._limit))
                self._step_at = now
            self._limit = min(float(s.max_limit), self._limit + self._step / max(self._limit, 1.0))

    def dropped(self, now: float) -> None:
        """The upstream refused (429) or timed out.

        Each refusal is one call more than the upstream could take: the limit goes 1 down,
        which is exact for a probe past the capacity (a probe that grew the limit by its step
        is refused at most step times). More refusals in one round-trip than the last step
        explains mean the capacity itself fell (a brown-out): the limit goes at once to half
        of what it was at the round-trip's start, rather than 1 down per refused call, as
        each of those calls would be one more 429 seen by a client.
        """
        if now - self._floor_at >= max(self.recent, 0.05):
            self._floor_at, self._floor, self._refusals = now, self._limit / 2, 0
            self._room = max(1, int(self._step))
        self._refusals += 1
        self.refused += 1
        self._ceiling = self._limit
        low = max(float(self.settings.min_limit), self._floor)
        self._limit = low if self._refusals > self._room + 1 else max(low, self._limit - 1.0)
        self._hold(now)

    def refused_elsewhere(self, now: float, refusals: int, before: float) -> None:
        """Other processes calling the same upstream met `refusals` refusals since the last seats round, when
        this limit was `before` (docs/overload.md#processes). The capacity is one for them all and the
        upstream refuses whichever call comes when it is full, so the call refused there may well have been
        answering this process's probe: what this limit grew since then goes back (up to one call a
        refusal), and it holds, as after a refusal of its own. Otherwise a process whose probes were
        answered by the other's 429s saw no refusal, doubled its step each round-trip and pushed the other
        down call by call: a storm of 429s, and one process's interactive requests waiting behind a limit
        of 1 or 2 while the other served batch."""
        grown = self._limit - before
        if grown > 0:
            self._ceiling = min(self._ceiling, self._limit)
            self._limit = max(float(self.settings.min_limit), self._limit - min(grown, float(refusals)))
        self._hold(now)

    def lend(self, now: float) -> None:
        """A more important request waits in another process than any waiting here (docs/overload.md#processes):
        one call of this limit goes to the cluster (the other process may grow into it) and this one holds."""
        self._limit = max(float(self.settings.min_limit), self._limit - 1.0)
        self._hold(now)

    def unhold(self) -> None:
        """This process has the cluster's most important waiting requests: it may probe at once (into what
        the others lend) instead of sitting out a hold."""
        self._hold_until = -1e18

    @property
    def level(self) -> float:
        """The limit with its fraction (what a seats round remembers to compare growth against)."""
        return self._limit

    def _hold(self, now: float) -> None:
        """No growth for HOLD_S; then probe again from a step of 1."""
        self._hold_until, self._step, self._step_at = now + HOLD_S, 0.5, now

    def _cut(self, now: float) -> None:
        if now - self._last_cut < max(self.recent, 0.05):  # once per round-trip
            return
        self._last_cut = now
        s = self.settings
        self._limit = max(float(s.min_limit), self._limit * s.backoff)
        self._hold(now)
