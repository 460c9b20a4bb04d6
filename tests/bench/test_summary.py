"""The summary of make bench: each target met, missed by how much, or not measured."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench import report, summary
from bench.summary import Check


def test_a_ceiling_is_met_at_the_threshold_and_missed_by_the_excess_and_its_ratio() -> None:
    assert Check("p50", 0.35, "ms", "<=", 0.35).verdict() == "met"
    assert Check("p50", 0.5, "ms", "<=", 0.35).verdict() == "missed by 0.15 ms (× 1.43)"
    assert Check("health", 50.0, "ms", "<", 50.0).verdict().startswith("missed by 0 ms")


def test_a_floor_is_missed_by_the_shortfall_and_a_missing_figure_is_never_met() -> None:
    assert Check("rps", 3100.0, "req/s", ">=", 3000.0).verdict() == "met"
    assert Check("rps", 2000.0, "req/s", ">=", 3000.0).verdict() == "missed by 1 000 req/s (× 1.5)"
    assert Check("w2/w1", 1.2, "×", ">=", 1.5).row() == ["w2/w1", "× 1.2", "≥ × 1.5", "missed by 0.3 (× 1.25)"]
    assert Check("rps", None, "req/s", ">=", 3000.0).verdict() == "not measured"
    assert Check("redis hit", 180.0, "µs").verdict() == "reported"


RUN = {
    "meta": {"features_ran_on": {"database": "PostgreSQL", "redis": "Redis"}},
    "scenarios": {
        "latency": {
            "direct": {"p50": 0.3, "p99": 0.5, "p999": 1.0},
            "added": {"p50": 0.5, "p99": 1.0, "p999": 2.0},
            "sides": {
                "daphne": {"server": "daphne", "added": {"p50": 1.3, "p99": 3.0, "p999": 5.0}},
                "features": {"server": "uvicorn", "added": {"p50": 0.6, "p99": 1.5, "p999": 2.5}},
                "daphne features": {"server": "daphne", "added": {"p50": 1.5, "p99": 3.2, "p999": 6.0}},
            },
        },
        "throughput": {"c32": {"gateway": {"rps": 2000.0}, "sides": {"features": {"rps": 1800.0}}}},
        "storm": {"health_p99_ms": 30.0, "others": {"daphne": {"health_p99_ms": 70.0}}},
    },
}


def test_rows_read_each_benchmark_and_the_features_cost_is_against_the_same_server() -> None:
    docs = {"run": RUN, "limits": {"budgeted_added_us": 12.0}, "workers": {"workers": {"c128": {"ratio": 1.1}}}}
    by_label = {c.label: c for c in summary.checks(docs)}
    assert by_label["features, uvicorn, 1 client: added p50"].verdict() == "missed by 0.25 ms (× 1.71)"
    assert by_label["features, daphne, 1 client: added p50"].value == 1.5
    assert by_label["limits + budget check (alone)"].verdict() == "met"
    assert by_label["deployment selection (alone)"].verdict() == "not measured"  # its bench did not run
    assert by_label["/health p99 in the 429 storm, uvicorn"].verdict() == "met"
    assert by_label["/health p99 in the 429 storm, daphne"].verdict().startswith("missed by 20 ms")
    assert by_label["serve --workers 2 / --workers 1 at 128 clients"].verdict().startswith("missed by 0.4")
    # the features' own cost: features minus plain on the same server (uvicorn plain is the main gateway)
    assert by_label["features - plain, uvicorn: p50"].value == 0.1
    assert by_label["features - plain, daphne: p99.9"].value == 1.0
    assert by_label["daphne - uvicorn, plain: added p50 (the server's share)"].value == 0.8
    assert report.feature_cost(RUN["scenarios"]["latency"], "daphne features") == {"p50": 0.2, "p99": 0.2, "p999": 1.0}


def test_main_prints_one_table_from_the_run_directory_and_writes_the_summary(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes(orjson.dumps(RUN))
    (run_dir / "broken.json").write_text("{not json")
    lines: list[str] = []
    out = tmp_path / "summary.json"
    summary.main(["--run-dir", str(run_dir), "--out", str(out)], lines.append)
    text = "\n".join(lines)
    assert "features ran on: PostgreSQL, Redis" in text
    assert "features, uvicorn, 1 client: added p50" in text and "missed by 0.25 ms" in text
    written = orjson.loads(out.read_bytes())
    verdicts = {r["label"]: r["verdict"] for r in written["rows"]}
    assert verdicts["/health p99 in the 429 storm, uvicorn"] == "met"
    assert verdicts["cache lookup miss, in memory (alone)"] == "not measured"


def test_save_writes_into_the_run_directory_only_when_make_bench_set_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(summary.RUN_DIR_ENV, raising=False)
    assert summary.save("x", {"a": 1}) is None
    monkeypatch.setenv(summary.RUN_DIR_ENV, str(tmp_path / "run"))
    path = summary.save("cache", {"miss_us": 7.5})
    assert path is not None and orjson.loads(path.read_bytes()) == {"miss_us": 7.5}
    assert summary.load(tmp_path / "run") == {"cache": {"miss_us": 7.5}}


def test_the_field_path_fuzzer_rows_need_enough_cases_and_no_5xx_on_each_server() -> None:
    fuzzed = {
        "uvicorn": {"cases": 54095, "failures": 0, "tracebacks": 0, "alive": True},
        "daphne": {"cases": 54095, "failures": 2, "tracebacks": 2, "alive": True},
    }
    by_label = {c.label: c for c in summary.checks({"fieldfuzz": fuzzed})}
    assert by_label["field-path fuzzer, uvicorn: cases"].verdict() == "met"
    assert by_label["field-path fuzzer, uvicorn: 5xx, no answer or traceback"].verdict() == "met"
    assert by_label["field-path fuzzer, daphne: 5xx, no answer or traceback"].verdict().startswith("missed by 4")
    missing = {c.label: c for c in summary.checks({})}
    assert missing["field-path fuzzer, daphne: cases"].verdict() == "not measured"


def test_this_round_s_rows_count_the_redis_round_trip_and_hold_every_new_path_to_chat_s() -> None:
    latency = {
        **RUN["scenarios"]["latency"],
        "sides": {
            **RUN["scenarios"]["latency"]["sides"],
            "features no cache": {"server": "uvicorn", "added": {"p50": 0.55, "p99": 1.2, "p999": 2.0}},
        },
    }
    throughput = {
        "c32": {
            "gateway": {"rps": 2000.0},
            "sides": {"features": {"rps": 1500.0, "vs_plain": 0.75}, "features no cache": {"vs_plain": 0.85}},
        }
    }
    run = {**RUN, "scenarios": {**RUN["scenarios"], "latency": latency, "throughput": throughput}}
    docs = {
        "run": run,
        "cache": {"lookup_p99_us": 250.0},  # the features' p99 target becomes 1.3 + 0.25 ms
        "responses_stream": {
            "pooled": {
                "chat": {"p50": 0.5, "p99": 1.0},
                "responses": {"p50": 0.6, "p99": 1.1},  # relayed: p50 over 0.4, p99 over 1.0
                "translated": {"p50": 0.6, "p99": 1.2},  # translated: p99 under 1.3, within 1.3× of chat
                "messages-translated": {"p50": 0.8, "p99": 1.2},  # p50 at 1.6× chat's
            }
        },
        "affinity": {"plain_pick_us": 1.0, "chat-20": {"added_us": 0.4}, "agent-200k": {"added_us": 6.0}},
        "ab_alerts": {"figures": [{"figure": "added p50 (ms), 1 client", "base_median": 0.5, "head_median": 0.55}]},
    }
    by_label = {c.label: c for c in summary.checks(docs)}
    assert by_label["governed (limits, budget, 2 deployments, no cache), 1 client: added p99"].verdict() == "met"
    assert by_label["features with the shared cache, 1 client: added p99"].threshold == 1.55
    assert by_label["features with the shared cache, 1 client: added p99"].verdict() == "met"  # 1.5 ms
    assert by_label["governed ratio: governed / plain req/s at 32 clients"].verdict() == "met"
    assert by_label["stream responses (relayed): added TTFB p50"].verdict().startswith("missed by 0.2 ms")
    assert by_label["stream responses (relayed): added TTFB p99"].verdict().startswith("missed by 0.1 ms")
    assert by_label["stream translated (translated): added TTFB p99"].verdict() == "met"
    assert by_label["stream translated (translated): added TTFB p50"].verdict() == "reported"
    assert by_label["stream messages-translated / chat: added TTFB p50"].verdict().startswith("missed by 0.3")
    assert by_label["stream translated / chat: added TTFB p99"].verdict() == "met"
    assert by_label["prompt-cache affinity: added per request, worst body (alone)"].value == 6.0
    assert by_label["alerts configured / not: added p50, 1 client"].value == 1.1
    assert by_label["alerts configured / not: added p99, 1 client"].verdict() == "not measured"
    assert by_label["features - plain, uvicorn: p50"].value == 0.1  # plain, not the governed side


def test_without_a_redis_figure_the_features_p99_is_not_judged_against_a_made_up_target() -> None:
    by_label = {c.label: c for c in summary.checks({"run": RUN})}
    row = by_label["features with the shared cache, 1 client: added p99"]
    assert row.value == 1.5 and row.verdict() == "reported"
    assert by_label["governed ratio: governed / plain req/s at 32 clients"].verdict() == "not measured"
