"""The benchmark harness's pure parts: the numbers in the table must be the right ones."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from bench import config, report
from bench.stats import added, percentile, point_key, ratio, summarize, within


def test_percentile_interpolates_like_numpy() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile(list(range(1, 1001)), 99.9) == pytest.approx(999.001)


def test_percentile_refuses_an_empty_sample_instead_of_reporting_zero() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_summary_and_added_latency_are_differences_of_percentiles() -> None:
    direct = summarize([0.3] * 990 + [1.0] * 10)
    gateway = summarize([0.7] * 990 + [3.0] * 10)
    assert point_key(99.9) == "p999"
    assert direct["n"] == 1000 and direct["p50"] == 0.3 and direct["max"] == 1.0
    # p99 of 1000 sorted values sits at rank 989.01, between the last 0.3 and the first 1.0:
    # 0.3 + 0.01 * 0.7 = 0.307 direct, 0.7 + 0.01 * 2.3 = 0.723 through the gateway
    assert (direct["p99"], gateway["p99"]) == (pytest.approx(0.307), pytest.approx(0.723))
    assert added(gateway, direct) == {"p50": 0.4, "p99": pytest.approx(0.416), "p999": 2.0}


def test_ratio_and_within() -> None:
    assert ratio(1500, 3000) == 0.5
    assert ratio(1, 0) is None and ratio(None, 2) is None
    assert within(109, 100, 0.10) and not within(111, 100, 0.10)


SAMPLE = {
    "meta": {"server": "daphne", "peers": []},
    "scenarios": {
        "latency": {
            "direct": {"p50": 0.3, "p99": 0.5, "p999": 1.0},
            "gateway": {"p50": 0.7, "p99": 1.2, "p999": 3.0},
            "added": {"p50": 0.4, "p99": 0.7, "p999": 2.0},
        },
        "throughput": {
            "c32": {
                "direct": {"rps": 10000.0, "p99_ms": 5.0},
                "gateway": {"rps": 2000.0, "p99_ms": 30.0},
                "ratio": 0.2,
            },
        },
        "storm": {
            "requests": 500,
            "statuses": {"429": 300, "503": 200},
            "only_429_503": True,
            "deadline_ms": 15000,
            "max_latency_ms": 900.0,
            "all_within_deadline": True,
            "health_n": 40,
            "health_p99_ms": 80.0,
            "health_max_ms": 90.0,
            "rss_before_mb": 100.0,
            "rss_after_mb": 101.0,
            "rss_growth_pct": 1.0,
            "rss_within_10pct": True,
            "upstream_calls": 700,
            "naive_bound": 1500,
            "calls_vs_naive": 0.467,
        },
    },
}


def test_table_rows_judge_each_target() -> None:
    rows = report.rows(SAMPLE)
    by_metric = {(r[0] or "", r[1]): r for r in rows}
    p50 = by_metric[("latency 1 client", "p50 ms")]
    assert p50[2:5] == ["0.3", "0.7", "+0.4"] and p50[-1] == "ok"
    assert by_metric[("throughput 32 clients", "req/s")][-1] == "ok"  # 2 000 ≥ 1 500
    health = next(r for r in rows if r[1].startswith("/health"))
    assert health[-1] == "MISS"  # 80 ms is not < 50 ms
    text = report.render(rows)
    lines = text.splitlines()
    assert lines[0].startswith("scenario") and set(lines[1]) <= {"-", " "}
    # columns line up: every row's third column starts at the same offset as the header's
    offset = lines[0].index("direct")
    assert all(line[offset - 2 : offset] == "  " for line in lines[2:] if len(line) > offset)


def test_every_peer_gets_its_rows_and_only_a_peer_with_a_target_is_judged() -> None:
    doc = copy.deepcopy(SAMPLE)
    lat, c32 = doc["scenarios"]["latency"], doc["scenarios"]["throughput"]["c32"]
    lat["peers"] = {
        "LiteLLM 1": {"p50": 9.3, "p99": 20.5, "added": {"p50": 9.0, "p99": 20.0}},
        "Portkey 2": {"p50": 2.3, "p99": 4.5, "added": {"p50": 2.0, "p99": 4.0}},
    }
    c32["peers"] = {
        "LiteLLM 1": {"rps": 80.0, "p99_ms": 400.0, "vs_peer": 25.0, "target": 20},
        "Portkey 2": {"rps": 1000.0, "p99_ms": 50.0, "vs_peer": 2.0, "target": None},
    }
    rows = report.rows(doc)
    by_metric = {r[1]: r for r in rows}
    assert by_metric["p50 ms, LiteLLM 1"][3:5] == ["9.3", "+9"]
    assert by_metric["p99 ms, Portkey 2"][3:5] == ["4.5", "+4"]
    litellm, portkey = by_metric["LiteLLM 1 req/s (p99 ms)"], by_metric["Portkey 2 req/s (p99 ms)"]
    assert (litellm[4], litellm[-1]) == ("Switchboard × 25", "ok")
    assert (portkey[4], portkey[5], portkey[-1]) == ("Switchboard × 2", "", "")


def test_peers_file_is_read_and_a_bad_one_is_refused_with_its_path(tmp_path: Path) -> None:
    from bench.run import _parse

    good = tmp_path / "peers.json"
    good.write_text('[{"name": "P", "url": "http://127.0.0.1:1/", "key": "k", "headers": {"x-a": "b"}}]')
    (peer,) = _parse(["--peers-file", str(good)]).peers
    assert (peer.url, peer.request_headers()) == ("http://127.0.0.1:1", {"Authorization": "Bearer k", "x-a": "b"})
    bad = tmp_path / "bad.json"
    bad.write_text('[{"url": "http://x"}]')
    with pytest.raises(SystemExit):
        _parse(["--peers-file", str(bad)])


def test_compare_calls_a_move_better_or_worse_by_direction_and_ignores_noise() -> None:
    after = {
        "scenarios": {
            "latency": {"added": {"p50": 0.2, "p99": 0.72, "p999": 4.0}, "gateway": {"p50": 0.5}},
            "throughput": {"c32": {"gateway": {"rps": 1000.0, "p99_ms": 30.0}, "ratio": 0.1}},
        }
    }
    entries = {e["metric"]: e for e in report.compare(SAMPLE, after)}
    assert entries["latency.added.p50"]["verdict"] == "better"  # lower latency
    assert entries["latency.added.p99"]["verdict"] == "same"  # +2.9 % is noise
    assert entries["latency.added.p999"]["verdict"] == "worse"
    assert entries["throughput.c32.gateway.rps"]["verdict"] == "worse"  # lower throughput
    assert entries["throughput.c32.gateway.rps"]["pct"] == -50.0
    assert "storm.upstream_calls" not in entries  # only metrics present in both runs
    everything = {e["metric"] for e in report.compare(SAMPLE, after, everything=True)}
    assert "latency.gateway.p50" in everything
    assert "compare" not in report.compare_table(list(entries.values())).splitlines()[0]


def test_generated_configuration_makes_every_policy_count() -> None:
    doc = yaml.safe_load(config.config_yaml("http://127.0.0.1:9", models=50, policies=40))
    assert len(doc["models"]) == 50 and len({m["id"] for m in doc["models"]}) == 50
    policies = doc["orgs"][0]["policies"]
    assert len(policies) == 40
    assert doc["orgs"][0]["default_action"] == "deny"  # only the last, allow policy lets requests through
    assert [p["action"] for p in policies].count("allow") == 1
    assert max(policies, key=lambda p: p["priority"])["action"] == "allow"
    assert all(not p["pattern"].startswith("bench") for p in policies if p["action"] == "deny")
    chat = next(m for m in doc["models"] if m["id"] == config.CHAT[0])
    assert chat["upstream_model"] == config.CHAT[1]
    with pytest.raises(ValueError):
        config.config_document("http://x", models=2)


async def test_load_generator_times_interleaved_batches_against_the_mock() -> None:
    from bench.loadgen import run_latency
    from tools.mock.upstream import start_mock, state_of

    runner, port = await start_mock()
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        spec = {
            "targets": [
                {"name": "a", "url": url, "body": config.chat_body("model-a")},
                {"name": "b", "url": url, "body": config.chat_body("model-b", stream=True), "batch": 2},
            ],
            "rounds": 3,
            "batch": 4,
            "warmup": 1,
            "stream": False,
        }
        out = await run_latency(spec)
        assert out["rounds"] == 3
        assert len(out["samples"]["a"]) == 12 and len(out["samples"]["b"]) == 6  # per-target batch honoured
        assert out["statuses"] == {"a": {200: 12}, "b": {200: 6}}
        assert all(ms > 0 for ms in out["samples"]["a"])
        assert state_of(runner).model("model-a").count == 13  # warm-up + 3 rounds × 4
        streamed = await run_latency({**spec, "stream": True})
        first, last = streamed["samples"]["b"]["ttfb"], streamed["samples"]["b"]["ttlb"]
        assert len(first) == 6 and all(f <= t for f, t in zip(first, last, strict=True))
    finally:
        await runner.cleanup()


def test_feature_configuration_is_valid_and_enables_every_feature_on_one_model_and_agent() -> None:
    from routing.config.validation import validate_document

    doc = yaml.safe_load(config.features_yaml("http://127.0.0.1:9"))
    assert validate_document(doc) == []
    model = next(m for m in doc["models"] if m["id"] == config.FEATURES[0])
    assert len({d["provider"] for d in model["deployments"]}) == 2 and model["cache_ttl_s"] > 0
    governed = next(m for m in doc["models"] if m["id"] == config.GOVERNED[0])  # the same, without the cache
    assert governed["deployments"] == model["deployments"] and "cache_ttl_s" not in governed
    agent = next(a for a in doc["orgs"][0]["agents"] if a["name"] == config.FEATURE_AGENT)
    assert agent["limits"]["rpm"] and agent["budget"]["usd"]
    assert {m["id"] for m in config.config_document("http://127.0.0.1:9")["models"]} < {m["id"] for m in doc["models"]}


async def test_a_varying_target_sends_a_different_body_each_request_so_the_cache_always_misses() -> None:
    from bench.loadgen import run_latency
    from tools.mock.upstream import start_mock, state_of

    runner, port = await start_mock()
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        target = {"name": "v", "url": url, "body": config.chat_body("model-v", vary=True), "vary": config.VARY}
        out = await run_latency({"targets": [target], "rounds": 2, "batch": 3, "warmup": 0})
        assert out["statuses"] == {"v": {200: 6}}
        bodies = [body for _, _, body, _ in state_of(runner).model("model-v").requests]
        assert len(bodies) == 6 and len(set(bodies)) == 6
        assert all(config.VARY.encode() not in b for b in bodies)
    finally:
        await runner.cleanup()


def test_realistic_configuration_is_valid_and_the_size_of_a_real_deployment() -> None:
    from bench.ab import PROFILES, body, model
    from routing.config.validation import validate_document

    doc = yaml.safe_load(PROFILES["realistic"].document("http://127.0.0.1:9"))
    assert validate_document(doc) == []
    assert len(doc["models"]) == config.REALISTIC_MODELS and len(doc["providers"]) == 3
    assert len(doc["aliases"]) == config.REALISTIC_ALIASES and len(doc["orgs"]) == config.REALISTIC_ORGS
    assert sum(len(o["agents"]) for o in doc["orgs"]) > config.REALISTIC_ORGS
    bench_org = next(o for o in doc["orgs"] if o["name"] == config.ORG)
    assert len(bench_org["policies"]) == config.REALISTIC_POLICIES  # the whole list evaluated per request
    assert model("realistic") == config.CHAT[0] and body("realistic") == body("plain")  # same request, bigger world


def test_the_configuration_size_scenario_s_large_configuration_is_one_the_gateway_accepts() -> None:
    """It once asked for 5 000 policies in one org, past the validation's bound: the row failed every run."""
    from routing.config.validation import validate_document

    doc = yaml.safe_load(config.large_yaml("http://127.0.0.1:9"))
    assert validate_document(doc) == []
    assert len(doc["models"]) == config.LARGE_MODELS and len(doc["orgs"][0]["policies"]) == config.large_policies()
