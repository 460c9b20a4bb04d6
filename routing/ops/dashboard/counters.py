"""Rolling per-model counters of the dashboard: requests, errors and fallbacks per second.

Fed by `note_request` (a request listener installed by the composition root) and read
by `model_stats` when the state is built. Memory only; 1 s buckets over WINDOW_S.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WINDOW_S = 300  # error and fallback rates
RATE_WINDOW_S = 60  # requests per second

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


_stats: dict[str, Rolling] = {}


def note_request(model_used: str, status: int, fallback_reason: str | None) -> None:
    """Count one finished request for its model (hot path: a dict hit and three list ops)."""
    if not model_used:
        return
    rolling = _stats.get(model_used)
    if rolling is None:
        if len(_stats) > 5000:  # model ids come from the configuration; this is only a guard
            return
        rolling = _stats[model_used] = Rolling()
    rolling.add(int(clock()), status >= 500, bool(fallback_reason))


def model_stats() -> dict[str, dict[str, float]]:
    now_s = int(clock())
    return {model: rolling.summary(now_s) for model, rolling in list(_stats.items())}
