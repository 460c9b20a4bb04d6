"""Rolling per-model counters of the dashboard: requests, errors and fallbacks per second, and sparklines.

Fed by the request path (routing.runtime.accounting.observe, with the serving process's
`Process.counters`) with the model that served (or, when nothing served, the last link
tried); `note_request` counts into the installed process's. Read by
`model_stats` when the state is built. Memory only: 1 s buckets over WINDOW_S for the
rates, and 1 min buckets over SPARK_MINUTES (requests, errors, a latency histogram
for the p50) for the sparklines (docs/operations.md#sparklines).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from routing.runtime.process import installed

WINDOW_S = 300  # error and fallback rates
RATE_WINDOW_S = 60  # requests per second
SPARK_MINUTES = 15
# Latency histogram: geometric buckets of LAT_FACTOR from 1 ms, so the p50 is within ~6 %.
LAT_FACTOR = 1.25
LAT_BUCKETS = 64  # up to 1.25**63 ms, about 20 minutes
_LOG_FACTOR = math.log(LAT_FACTOR)


def latency_bucket(ms: float) -> int:
    if ms <= 1.0:
        return 0
    return min(LAT_BUCKETS - 1, int(math.log(ms) / _LOG_FACTOR) + 1)


def bucket_ms(i: int) -> float:
    """A representative latency of bucket i (the geometric middle of its bounds)."""
    if i == 0:
        return 1.0
    return LAT_FACTOR ** (i - 0.5)


class Minutes:
    """Per minute over the last SPARK_MINUTES: requests, errors, and a latency histogram."""

    __slots__ = ("mins", "req", "err", "lat")

    def __init__(self) -> None:
        self.mins = [-1] * SPARK_MINUTES
        self.req = [0] * SPARK_MINUTES
        self.err = [0] * SPARK_MINUTES
        self.lat: list[list[int] | None] = [None] * SPARK_MINUTES

    def add(self, now_s: int, error: bool, latency_ms: float | None) -> None:
        minute = now_s // 60
        i = minute % SPARK_MINUTES
        if self.mins[i] != minute:
            self.mins[i] = minute
            self.req[i] = self.err[i] = 0
            self.lat[i] = None
        self.req[i] += 1
        if error:
            self.err[i] += 1
        if latency_ms is not None:
            hist = self.lat[i]
            if hist is None:
                hist = self.lat[i] = [0] * LAT_BUCKETS
            hist[latency_bucket(latency_ms)] += 1

    def series(self, now_s: int) -> dict[str, object]:
        """Oldest minute first; `t0` is the epoch minute (x 60 = seconds) of the first point."""
        current = now_s // 60
        first = current - SPARK_MINUTES + 1
        req, err, p50 = [], [], []
        for minute in range(first, current + 1):
            i = minute % SPARK_MINUTES
            if self.mins[i] == minute:
                req.append(self.req[i])
                err.append(self.err[i])
                p50.append(_median(self.lat[i]))
            else:
                req.append(0)
                err.append(0)
                p50.append(None)
        return {"t0": first * 60, "req": req, "err": err, "p50": p50}


def _median(hist: list[int] | None) -> float | None:
    if not hist:
        return None
    total = sum(hist)
    if not total:
        return None
    half = (total + 1) / 2
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= half:
            return round(bucket_ms(i), 1)
    return None


clock: Callable[[], float] = time.monotonic  # injectable for tests


class Rolling:
    """Requests, errors (status >= 500) and fallbacks per second, over the last WINDOW_S seconds."""

    __slots__ = ("secs", "req", "err", "fb")

    def __init__(self) -> None:
        self.secs = [-1] * WINDOW_S
        self.req = [0] * WINDOW_S
        self.err = [0] * WINDOW_S
        self.fb = [0] * WINDOW_S

    def add(self, now_s: int, error: bool, fallback: bool) -> None:
        i = now_s % WINDOW_S
        if self.secs[i] != now_s:
            self.secs[i] = now_s
            self.req[i] = self.err[i] = self.fb[i] = 0
        self.req[i] += 1
        if error:
            self.err[i] += 1
        if fallback:
            self.fb[i] += 1

    def summary(self, now_s: int) -> dict[str, float]:
        window_start = now_s - WINDOW_S
        rate_start = now_s - RATE_WINDOW_S
        total = errors = fallbacks = recent = 0
        for sec, req, err, fb in zip(self.secs, self.req, self.err, self.fb, strict=True):
            if sec > window_start and sec <= now_s:
                total += req
                errors += err
                fallbacks += fb
                if sec > rate_start:
                    recent += req
        return {
            "rps": round(recent / RATE_WINDOW_S, 3),
            "requests": total,
            "errors": errors,
            "fallbacks": fallbacks,
            "error_rate": round(errors / total, 4) if total else 0.0,
            "fallback_rate": round(fallbacks / total, 4) if total else 0.0,
        }


class ModelCounters:
    """One process's counters per model (`Process.counters`), fed by its requests' accounting."""

    __slots__ = ("stats", "minutes")

    def __init__(self) -> None:
        self.stats: dict[str, Rolling] = {}
        self.minutes: dict[str, Minutes] = {}

    def note(self, model_used: str, status: int, fallback_reason: str | None, latency_s: float | None = None) -> None:
        """Count one finished request for the model that served it (hot path: dict hits and a few list ops)."""
        if not model_used:
            return
        rolling = self.stats.get(model_used)
        if rolling is None:
            if len(self.stats) > 5000:  # model ids come from the configuration; this is only a guard
                return
            rolling = self.stats[model_used] = Rolling()
            self.minutes[model_used] = Minutes()
        now_s = int(clock())
        error = status >= 500
        rolling.add(now_s, error, bool(fallback_reason))
        self.minutes[model_used].add(now_s, error, latency_s * 1000.0 if latency_s is not None else None)

    def model_stats(self) -> dict[str, dict[str, object]]:
        """Per model: the rates of the last minutes and its sparkline series."""
        now_s = int(clock())
        out: dict[str, dict[str, object]] = {}
        for model, rolling in list(self.stats.items()):
            entry: dict[str, object] = dict(rolling.summary(now_s))
            minutes = self.minutes.get(model)
            if minutes is not None:
                entry["spark"] = minutes.series(now_s)
            out[model] = entry
        return out


def note_request(model_used: str, status: int, fallback_reason: str | None, latency_s: float | None = None) -> None:
    """The request listener: count one finished request in the current process's counters."""
    process = installed()
    if process is not None and process.counters is not None:
        process.counters.note(model_used, status, fallback_reason, latency_s)


def model_stats() -> dict[str, dict[str, object]]:
    """Per model of the current process: the rates of the last minutes and its sparkline series."""
    process = installed()
    return process.counters.model_stats() if process is not None and process.counters is not None else {}
