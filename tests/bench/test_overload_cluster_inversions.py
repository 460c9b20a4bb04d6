"""bench.overload_cluster's `inversions`: what it counts as a batch call begun ahead of a waiting interactive one."""

from __future__ import annotations

from bench.overload_cluster import inversions


def row(cls: str, started: float, took: float, status: int = 200) -> tuple:
    return ("org-a", cls, status, "", took, started)


def test_a_batch_call_begun_while_an_interactive_request_waited_past_one_hold_counts_once_settled() -> None:
    """An interactive request that waited 0.5 s before its 0.1 s call (started at 10.0, answered at 10.6);
    batch calls beginning at 10.3 (inside its wait) count, at 10.55 (it had started by then) do not; the same
    inside the first 2 s of the run do not count either (the limits were still finding the capacity)."""
    rows = [
        row("interactive", 10.0, 0.6),
        row("batch", 10.2, 0.2),  # began 10.3: an inversion
        row("batch", 10.45, 0.2),  # began 10.55: after the interactive call started
        row("batch", 10.2, 0.2, status=503),  # shed: never began
    ]
    assert inversions(rows, settle=0.0) == 1
    early = [row("batch", 0.0, 0.1), *rows]  # the run began at 0.0: 10.3 is well past its first 2 s
    assert inversions(early) == 1
    assert inversions([row("interactive", 0.5, 0.6), row("batch", 0.0, 0.1), row("batch", 0.7, 0.2)]) == 0
    assert inversions([row("interactive", 0.5, 0.6), row("batch", 0.0, 0.1), row("batch", 0.7, 0.2)], settle=0.0) == 1
