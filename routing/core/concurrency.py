"""Adaptive concurrency limit of one deployment (docs/overload.md#adaptive-concurrency).

AIMD on explicit and latency signals. Growth: every good sample whose latency stays within
`tolerance` x the baseline adds step/limit (about +step per round-trip); the step doubles
each round-trip without a refusal (1, 2, 4... like TCP's slow start), and after a refusal
the limit holds for HOLD_S, then probes again from a step of 1. Probing above a hard
capacity thus costs about one refused call per HOLD_S, and a capacity that comes back is
found within HOLD_S plus a few round-trips. Each 429 or timeout takes 1 off the limit: every refused call is one
call more than the upstream could take, so a capacity that halves under 20 calls in flight
refuses 10 of them and the limit drops by 10 at once (never below half of what it was at
the start of the round-trip). A latency past the tolerance multiplies the limit by
`backoff`, at most once per recent round-trip. The baseline is a slow average of latencies seen while the
upstream was healthy (time to first token for streams), so LLM answers of varying
length do not look like congestion by themselves. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_S = 1.0  # no growth for this long after a refusal


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
        "_hold_until",
        "_step",
        "_step_at",
    )

    def __init__(self, settings: LimitSettings) -> None:
        self.settings = settings
        self._limit = float(max(settings.min_limit, min(settings.initial, settings.max_limit)))
        self.baseline = 0.0  # slow average of healthy latencies; 0 until the first sample
        self.recent = 0.0  # fast average: about one round-trip
        self._last_cut = -1e18
        self._floor_at = -1e18  # when this round-trip's floor for refusals was set
        self._floor = 0.0  # half the limit at the start of the round-trip
        self._hold_until = -1e18  # no growth before this (after a refusal)
        self._step = 0.5  # growth per round-trip (doubled to 1 by the first sample)
        self._step_at = -1e18  # when the step last doubled

    @property
    def limit(self) -> int:
        return int(self._limit)

    def reconfigure(self, settings: LimitSettings) -> None:
        """New bounds from the operator: the learnt limit is kept, clamped into them."""
        self.settings = settings
        self._limit = float(max(settings.min_limit, min(self._limit, settings.max_limit)))

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
        if inflight * 2 >= self._limit and now >= self._hold_until:  # only grow a limit that is used
            if now - self._step_at >= max(self.recent, 0.01):  # a round-trip without a refusal
                self._step = min(self._step * 2, max(1.0, self._limit / 2))
                self._step_at = now
            self._limit = min(float(s.max_limit), self._limit + self._step / self._limit)

    def dropped(self, now: float) -> None:
        """The upstream refused (429) or timed out: one call more than it could take."""
        if now - self._floor_at >= max(self.recent, 0.05):
            self._floor_at, self._floor = now, self._limit / 2
        self._limit = max(float(self.settings.min_limit), self._floor, self._limit - 1.0)
        self._hold(now)

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
