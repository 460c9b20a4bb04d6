"""Adaptive concurrency limit of one deployment (docs/overload.md#adaptive-concurrency).

AIMD on explicit and latency signals: every good sample whose latency stays within
`tolerance` x the baseline adds 1/limit (about +1 per limit's worth of calls, TCP's
congestion avoidance); a 429, a timeout, or a latency past the tolerance multiplies the
limit by `backoff`, at most once per recent round-trip so one burst of concurrent 429s
counts as one signal. The baseline is a slow average of latencies seen while the
upstream was healthy (time to first token for streams), so LLM answers of varying
length do not look like congestion by themselves. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    __slots__ = ("settings", "_limit", "baseline", "recent", "_last_cut")

    def __init__(self, settings: LimitSettings) -> None:
        self.settings = settings
        self._limit = float(max(settings.min_limit, min(settings.initial, settings.max_limit)))
        self.baseline = 0.0  # slow average of healthy latencies; 0 until the first sample
        self.recent = 0.0  # fast average: about one round-trip
        self._last_cut = -1e18

    @property
    def limit(self) -> int:
        return int(self._limit)

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
        if inflight * 2 >= self._limit:  # only grow a limit that is actually used
            self._limit = min(float(s.max_limit), self._limit + 1.0 / self._limit)

    def dropped(self, now: float) -> None:
        """The upstream refused (429) or timed out: it is past its capacity."""
        self._cut(now)

    def _cut(self, now: float) -> None:
        if now - self._last_cut < max(self.recent, 0.05):  # once per round-trip
            return
        self._last_cut = now
        s = self.settings
        self._limit = max(float(s.min_limit), self._limit * s.backoff)
