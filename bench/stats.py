"""Pure statistics for the benchmark: percentiles, summaries, differences.

Kept free of I/O so tests/bench can check the arithmetic the table relies on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The percentiles kept for every raw distribution (the "raw distributions" of the report).
SUMMARY_POINTS: tuple[float, ...] = (1, 10, 25, 50, 75, 90, 99, 99.9)


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default), p in [0, 100].

    Raises ValueError on an empty sample: a missing measurement must not read as 0.
    """
    if not values:
        raise ValueError("percentile of an empty sample; the scenario produced no measurements")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside [0, 100]")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def point_key(p: float) -> str:
    """'p50', 'p99', 'p99.9' -> JSON keys 'p50', 'p99', 'p999'."""
    return "p" + f"{p:g}".replace(".", "")


def summarize(values_ms: Sequence[float]) -> dict[str, float]:
    """n, mean, min, max and SUMMARY_POINTS of a sample in milliseconds (rounded to 1 µs)."""
    if not values_ms:
        raise ValueError("cannot summarize an empty sample; the scenario produced no measurements")
    ordered = sorted(values_ms)
    out: dict[str, float] = {"n": len(ordered)}
    for p in SUMMARY_POINTS:
        out[point_key(p)] = round(percentile(ordered, p), 3)
    out["mean"] = round(sum(ordered) / len(ordered), 3)
    out["min"] = round(ordered[0], 3)
    out["max"] = round(ordered[-1], 3)
    return out


def added(
    gateway: dict[str, float], direct: dict[str, float], keys: Sequence[str] = ("p50", "p99", "p999")
) -> dict[str, float]:
    """Difference of percentiles (gateway minus direct) for each key: what the gateway adds."""
    return {k: round(gateway[k] - direct[k], 3) for k in keys}


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base, or None when either is missing or the base is 0."""
    if value is None or base is None or base == 0:
        return None
    return round(value / base, 3)


def within(after: float, before: float, tolerance: float) -> bool:
    """True when `after` is no more than `tolerance` (a fraction) above `before`."""
    return after <= before * (1 + tolerance)
