"""`make bench-ab` never reports a win it did not measure (bench/ab_verdict.py)."""

from __future__ import annotations

import math

import pytest

from bench import ab, ab_verdict
from bench.ab_verdict import FASTER, HIGHER_IS_BETTER, LOWER_IS_BETTER, NOT_MEASURED, SAME, SLOWER


def test_lower_latency_in_every_round_is_faster():
    assert ab_verdict.verdict([0.80, 0.85, 0.90], [0.60, 0.62, 0.70], LOWER_IS_BETTER) == FASTER


def test_higher_latency_in_every_round_is_slower():
    assert ab_verdict.verdict([0.60, 0.62, 0.70], [0.80, 0.85, 0.90], LOWER_IS_BETTER) == SLOWER


def test_a_better_median_inside_the_spread_is_no_win():
    # head's median is 25 % better, but one head round is worse than one base round
    assert ab_verdict.verdict([0.80, 0.81, 0.95], [0.60, 0.61, 0.82], LOWER_IS_BETTER) == SAME


def test_touching_ranges_are_no_win():
    assert ab_verdict.verdict([1.0, 1.2, 1.4], [0.8, 0.9, 1.0], LOWER_IS_BETTER) == SAME


def test_throughput_is_better_when_higher():
    assert ab_verdict.verdict([1500, 1510, 1520], [1900, 1950, 2000], HIGHER_IS_BETTER) == FASTER
    assert ab_verdict.verdict([1900, 1950, 2000], [1500, 1510, 1520], HIGHER_IS_BETTER) == SLOWER


@pytest.mark.parametrize(
    ("base", "head"),
    [
        ([0.9, 0.9], [0.1, 0.1]),  # two rounds: not enough for a verdict
        ([0.9, 0.9, 0.9], []),  # head never measured
        ([0.9, 0.9, 0.9], [0.1, 0.1, math.nan]),  # one head round failed
        ([0.9, None, 0.9, 0.9], [0.1, 0.1, 0.1, 0.1]),  # one base round failed
    ],
)
def test_too_few_or_failed_rounds_give_no_verdict(base, head):
    assert ab_verdict.verdict(base, head, LOWER_IS_BETTER) == NOT_MEASURED


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError, match="better must be"):
        ab_verdict.verdict([1, 2, 3], [1, 2, 3], "faster")


def test_compare_reports_medians_difference_and_relative_change():
    fig = ab_verdict.compare("req/s", [1000, 1200, 1100], [1320, 1500, 1400], HIGHER_IS_BETTER)
    assert fig.base_median == 1100 and fig.head_median == 1400
    assert fig.difference == 300
    assert fig.relative == pytest.approx(300 / 1100)
    assert fig.verdict == FASTER
    row = fig.as_dict()
    assert row["base_range"] == [1000, 1200] and row["head_range"] == [1320, 1500]


def test_a_figure_never_measured_has_no_difference():
    fig = ab_verdict.compare("added p50", [], [], LOWER_IS_BETTER)
    assert fig.difference is None and fig.relative is None and fig.verdict == NOT_MEASURED
    assert "—" in ab_verdict.table([fig], "a", "b")


def test_the_table_shows_each_figure_with_its_range_and_verdict():
    figs = [
        ab_verdict.compare("added p50 (ms), 1 client", [0.8, 0.85, 0.9], [0.6, 0.62, 0.7], LOWER_IS_BETTER),
        ab_verdict.compare("req/s, wrk", [1500, 1510, 1520], [1490, 1530, 1515], HIGHER_IS_BETTER),
    ]
    text = ab_verdict.table(figs, "5101a09", "bd6add0")
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["figure", "base", "5101a09"]
    assert "0.850 [0.800…0.900]" in lines[1] and "0.620 [0.600…0.700]" in lines[1] and lines[1].endswith(FASTER)
    assert lines[2].endswith(SAME)


def test_the_runner_builds_latency_and_throughput_figures_from_rounds():
    lat = {
        "base": {"p50": [0.8, 0.9, 0.85], "p99": [2.0, 2.5, 2.2]},
        "head": {"p50": [0.5, 0.6, 0.55], "p99": [2.1, 2.4, 2.3]},
    }
    rps = {"base": [1500.0, 1520.0, 1510.0], "head": [1400.0, 1600.0, 1550.0]}
    figs = {f.name: f for f in ab.figures(lat, rps)}
    assert figs["added p50 (ms), 1 client"].verdict == FASTER
    assert figs["added p99 (ms), 1 client"].verdict == SAME
    assert figs["req/s, wrk"].verdict == SAME
    assert "req/s, wrk" not in {f.name for f in ab.figures(lat, {})}
    memory = {"base": [113.3, 113.3, 115.7], "head": [119.5, 126.1, 117.7]}
    rss = {f.name: f for f in ab.figures(lat, rps, None, memory)}["RSS after 10 000 requests (MB)"]
    assert rss.verdict == SLOWER and (rss.base_median, rss.head_median) == (113.3, 119.5)  # more memory is worse
    assert "RSS after 10 000 requests (MB)" not in {f.name for f in ab.figures(lat, rps)}


def test_fewer_rounds_than_asked_for_are_reported_as_not_measured():
    lat = {"base": {"p50": [0.8], "p99": [2.0]}, "head": {"p50": [0.1], "p99": [0.5]}}
    assert {f.verdict for f in ab.figures(lat, {})} == {NOT_MEASURED}


def test_a_base_whose_pins_are_all_installed_shares_this_interpreter():
    from importlib import metadata

    pin = f"orjson=={metadata.version('orjson')}"
    assert ab.satisfied(f"# runtime\n{pin}  # fast JSON\n\n")
    assert not ab.satisfied("orjson==0.0.1")
    assert not ab.satisfied("surely-not-installed-package==1.0")
    assert not ab.satisfied("orjson>=3")  # not a pin: build its own virtualenv
