"""The Responses TTFB benchmark's arithmetic (bench/responses_stream_bench.py, docs/performance.md#responses-ttfb):
each gateway target is measured against the upstream call it makes."""

from __future__ import annotations

from bench import responses_stream_bench as bench


def test_each_kind_is_measured_against_the_direct_call_it_makes() -> None:
    ttfb = {
        "direct chat": [1.0] * 10,
        "gateway chat": [3.0] * 10,
        "direct responses": [2.0] * 10,
        "gateway responses": [5.0] * 10,
        "gateway translated": [4.0] * 10,
    }
    added = bench.added_ttfb(ttfb)
    assert {kind: row["p50"] for kind, row in added.items()} == {"chat": 2.0, "responses": 3.0, "translated": 3.0}
    assert {row["n"] for row in added.values()} == {10}


def test_the_targets_are_the_five_the_kinds_name() -> None:
    names = {t["name"] for t in bench.targets("http://mock", "http://gw", "sb-key")}
    assert names == {name for pair in bench.KINDS.values() for name in pair}
    translated = next(t for t in bench.targets("http://mock", "http://gw", "k") if t["name"] == "gateway translated")
    assert translated["url"] == "http://gw/v1/responses" and '"stream":true' in translated["body"]
