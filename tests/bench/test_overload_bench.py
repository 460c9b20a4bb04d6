"""The overload benchmark's figures (bench/overload.py): Jain's index and the per-run summary."""

from __future__ import annotations

import pytest

from bench.overload import _figures, jain


def test_jains_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() -> None:
    assert jain([10, 10, 10]) == pytest.approx(1.0)
    assert jain([30, 0, 0]) == pytest.approx(1 / 3)


def test_the_figures_count_interactive_success_goodput_and_shed_answers() -> None:
    rows = [
        ("org-a", "interactive", 200, "", 0.1, 0.0),
        ("org-b", "interactive", 200, "", 0.2, 0.0),
        ("org-c", "batch", 503, "overloaded", 0.01, 0.0),
        ("org-c", "batch", 200, "", 0.3, 0.0),
    ]
    fig = _figures(rows, capacity=1, seconds=1.0, unloaded_p99=0.1)
    assert fig["interactive_success"] == 1.0
    assert fig["goodput_vs_c"] == 0.3  # 3 served in 1 s against 10 a second (1 slot, 100 ms)
    measured = _figures(rows, capacity=1, seconds=1.0, unloaded_p99=0.1, capacity_rps=6.0)
    assert measured["goodput_vs_c"] == 0.5  # against what the upstream really served alone: 6 a second
    assert measured["goodput_vs_nominal"] == 0.3
    assert fig["served_by_org"] == {"org-a": 1, "org-b": 1, "org-c": 1}
    assert fig["shed_at_once_share"] == 1.0
