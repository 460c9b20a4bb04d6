"""Pure arithmetic of `make bench-ab`: per-round figures of two revisions -> medians, spreads, verdict.

Kept free of I/O so its rules are unit tested (tests/bench/test_ab_verdict.py). The rule
that matters: **a difference is reported as a win or a loss only when it was measured** —
at least `MIN_ROUNDS` rounds on each side, and the two sides' ranges (min..max over the
rounds) do not overlap. Anything else reads "same within noise" or "not measured", never
a win: on a shared 2-core machine two runs of the same code differ by 10-40 % in tail
figures, so a median difference inside the spread says nothing (docs/performance.md#ab).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

MIN_ROUNDS = 3

# what "better" means for each figure the tool reports
LOWER_IS_BETTER = "lower"
HIGHER_IS_BETTER = "higher"

FASTER, SLOWER, SAME, NOT_MEASURED = "faster", "slower", "same within noise", "not measured"


@dataclass(frozen=True)
class Figure:
    """One figure compared over rounds: medians, ranges, the difference and the verdict."""

    name: str
    better: str
    base: tuple[float, ...]
    head: tuple[float, ...]
    verdict: str
    base_median: float | None
    head_median: float | None

    @property
    def difference(self) -> float | None:
        """head median − base median (same unit as the figure); None when not measured."""
        if self.base_median is None or self.head_median is None:
            return None
        return self.head_median - self.base_median

    @property
    def relative(self) -> float | None:
        """difference / base median; None when not measured or the base median is 0."""
        diff = self.difference
        if diff is None or not self.base_median:
            return None
        return diff / self.base_median

    def as_dict(self) -> dict[str, object]:
        return {
            "figure": self.name,
            "better": self.better,
            "base_rounds": list(self.base),
            "head_rounds": list(self.head),
            "base_median": self.base_median,
            "head_median": self.head_median,
            "base_range": _range(self.base),
            "head_range": _range(self.head),
            "difference": self.difference,
            "relative": self.relative,
            "verdict": self.verdict,
        }


def _range(values: Sequence[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def _clean(values: Sequence[float]) -> tuple[float, ...]:
    """The rounds that produced a number (a failed round is dropped, never read as 0)."""
    return tuple(float(v) for v in values if v is not None and math.isfinite(v))


def verdict(base: Sequence[float], head: Sequence[float], better: str, min_rounds: int = MIN_ROUNDS) -> str:
    """FASTER / SLOWER only when both sides have `min_rounds` rounds and their ranges do not overlap."""
    if better not in (LOWER_IS_BETTER, HIGHER_IS_BETTER):
        raise ValueError(f"better must be {LOWER_IS_BETTER!r} or {HIGHER_IS_BETTER!r}, not {better!r}")
    b, h = _clean(base), _clean(head)
    if len(b) < min_rounds or len(h) < min_rounds or len(b) != len(base) or len(h) != len(head):
        return NOT_MEASURED
    if better == LOWER_IS_BETTER:
        if max(h) < min(b):
            return FASTER
        if min(h) > max(b):
            return SLOWER
    else:
        if min(h) > max(b):
            return FASTER
        if max(h) < min(b):
            return SLOWER
    return SAME


def compare(name: str, base: Sequence[float], head: Sequence[float], better: str) -> Figure:
    """A Figure from the per-round values of both sides."""
    b, h = _clean(base), _clean(head)
    return Figure(
        name=name,
        better=better,
        base=b,
        head=h,
        verdict=verdict(base, head, better),
        base_median=median(b) if b else None,
        head_median=median(h) if h else None,
    )


def table(figures: Sequence[Figure], base_label: str, head_label: str) -> str:
    """The plain-text report: one row a figure, medians with their ranges, difference, verdict."""

    def cell(values: tuple[float, ...], mid: float | None) -> str:
        if mid is None:
            return "—"
        return f"{mid:.3f} [{min(values):.3f}…{max(values):.3f}]"

    rows = [("figure", f"base {base_label}", f"head {head_label}", "head − base", "verdict")]
    for f in figures:
        diff = f.difference
        rel = f.relative
        change = "—" if diff is None else f"{diff:+.3f}" + ("" if rel is None else f" ({rel:+.1%})")
        rows.append((f.name, cell(f.base, f.base_median), cell(f.head, f.head_median), change, f.verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
