"""Retry backoff (docs/resilience.md#r3): a pure function, so tests assert exact bounds."""

from __future__ import annotations

_MAX_SHIFT = 62  # 2**62 * any sane base is past every cap; avoids float overflow


def backoff_delay(attempt: int, base_s: float, max_s: float, retry_after_s: float | None, rand01: float) -> float:
    """Seconds to wait before retry `attempt` (0-based).

    e = min(base * 2**attempt, max); equal jitter d = e/2 + rand01 * e/2, so d is in
    [e/2, e]; then raised to the upstream's Retry-After when that is longer (a short
    Retry-After never shrinks the backoff).
    """
    exp = min(base_s * (1 << min(max(attempt, 0), _MAX_SHIFT)), max_s)
    delay = exp * 0.5 + rand01 * exp * 0.5
    if retry_after_s is not None and retry_after_s > delay:
        return retry_after_s
    return delay
