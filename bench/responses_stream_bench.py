"""`python -m bench.responses_stream_bench`: streamed `/v1/responses` time to first byte against streamed chat's, same run (docs/performance.md#responses-ttfb).

Starts the mock upstream and one gateway (its own throwaway SQLite database) and measures, one
client at a time and interleaved by bench.loadgen (so the machine's drift hits every target
alike), the time to the first body byte of five streams of 20 text frames each:

* `direct chat` and `gateway chat`: chat completions straight at the mock and through the gateway;
* `direct responses` and `gateway responses`: `/v1/responses` on a link whose upstream speaks it
  (relayed, the commit held until the first delta);
* `gateway translated`: `/v1/responses` on a chat-only link (chat chunks turned into Responses
  events), against `direct chat` (the upstream call it makes).

Each round gives each kind its added p50 (gateway − its direct call); the verdict compares the
rounds of Responses' added p50 with chat's as `make bench-ab` does (bench.ab_verdict: "slower" only
when the ranges do not overlap). The added p50 and p99 over all rounds' requests are printed too,
and the gateway's CPU time per streamed request of each kind (phases of one kind at a time, read
from /proc): what the machine's other tenants cannot blur. Results go to bench/results/responses-stream.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

import orjson
import yaml

from bench import ab_verdict, config, procs, summary
from bench.stats import percentile
from gateway_project import servers as serve_commands

RESULTS = Path(__file__).resolve().parent / "results"
FRAMES = 20
CHAT, RESPONSES, TRANSLATED = ("rs-chat", "rs-chat-up"), ("rs-responses", "rs-responses-up"), "rs-translated"
# kind -> (its gateway target, the direct target it is measured against)
KINDS = {
    "chat": ("gateway chat", "direct chat"),
    "responses": ("gateway responses", "direct responses"),
    "translated": ("gateway translated", "direct chat"),
}


def document(mock_url: str) -> dict[str, Any]:
    streaming = {"provider": "mock", "context_window": 128000}
    return {
        "providers": [{"name": "mock", "dialect": "openai", "base_url": f"{mock_url}/v1"}],
        "models": [
            {"id": CHAT[0], "upstream_model": CHAT[1], "capabilities": ["chat", "streaming"], **streaming},
            {
                "id": RESPONSES[0],
                "upstream_model": RESPONSES[1],
                "capabilities": ["chat", "responses", "streaming"],
                **streaming,
            },
            {"id": TRANSLATED, "upstream_model": CHAT[1], "capabilities": ["chat", "streaming"], **streaming},
        ],
        "orgs": [{"name": config.ORG, "agents": [{"name": config.AGENT}]}],
    }


def targets(mock_url: str, gateway_url: str, key: str) -> list[dict[str, Any]]:
    def responses_body(model: str) -> str:
        return orjson.dumps({"model": model, "input": "Say hello.", "stream": True}).decode()

    auth = {"Authorization": f"Bearer {key}"}
    return [
        {"name": "direct chat", "url": f"{mock_url}/v1/chat/completions", "body": config.chat_body(CHAT[1], True)},
        {
            "name": "gateway chat",
            "url": f"{gateway_url}/v1/chat/completions",
            "headers": auth,
            "body": config.chat_body(CHAT[0], True),
        },
        {"name": "direct responses", "url": f"{mock_url}/v1/responses", "body": responses_body(RESPONSES[1])},
        {
            "name": "gateway responses",
            "url": f"{gateway_url}/v1/responses",
            "headers": auth,
            "body": responses_body(RESPONSES[0]),
        },
        {
            "name": "gateway translated",
            "url": f"{gateway_url}/v1/responses",
            "headers": auth,
            "body": responses_body(TRANSLATED),
        },
    ]


def added_ttfb(ttfb: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per kind: the added TTFB p50 and p99 (ms, gateway − its direct call) and the requests measured."""
    out: dict[str, dict[str, float]] = {}
    for kind, (through, direct) in KINDS.items():
        out[kind] = {
            f"p{p}": round(percentile(ttfb[through], p) - percentile(ttfb[direct], p), 3) for p in (50, 99)
        } | {"n": len(ttfb[through])}
    return out


def one_round(spec_targets: list[dict[str, Any]], batch: int) -> dict[str, list[float]]:
    """One interleaved loadgen run: every target's TTFB samples (ms)."""
    spec = {"mode": "latency", "stream": True, "targets": spec_targets, "rounds": 2, "batch": batch}
    raw = procs.loadgen({**spec, "warmup": 10, "max_s": 120}, timeout=200)
    for name, statuses in raw["statuses"].items():
        if {str(k) for k in statuses} != {"200"}:
            raise RuntimeError(f"{name} answered {statuses}: the comparison would be void")
    return {name: sample["ttfb"] for name, sample in raw["samples"].items()}


def cpu_ms(pid: int) -> float:
    """CPU time (user + system, ms) of `pid` and its descendants so far."""
    total, todo = 0, [pid]
    for _ in range(64):  # bounded tree walk, as procs.rss_kb
        if not todo:
            break
        current = todo.pop()
        try:
            with open(f"/proc/{current}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        todo.extend(procs._children(current))  # noqa: SLF001 - the same tree walk
    return total * 1000 / os.sysconf("SC_CLK_TCK")


def cpu_per_request(spec_targets: list[dict[str, Any]], pid: int, requests: int, reps: int) -> dict[str, float]:
    """The gateway's CPU ms per streamed request of each kind, one client, the kinds in ABC CBA order:
    CPU time is what the gateway spends, whatever the machine's other tenants do to wall time."""
    through = {t["name"]: t for t in spec_targets if t["name"].startswith("gateway")}
    spent: dict[str, list[float]] = {name: [] for name in through}
    for r in range(reps):
        for name in through if r % 2 == 0 else reversed(list(through)):
            before = cpu_ms(pid)
            raw = procs.loadgen(
                {"mode": "count", "target": through[name], "total": requests, "concurrency": 1, "max_s": 120}, 200
            )
            if raw["statuses"] != {"200": requests}:
                raise RuntimeError(f"{name} answered {raw['statuses']}: the comparison would be void")
            spent[name].append((cpu_ms(pid) - before) / requests)
    kinds = {through_name: kind for kind, (through_name, _) in KINDS.items()}
    return {kinds[name]: round(median(values), 3) for name, values in spent.items()}


def measure(mock_url: str, gateway_url: str, key: str, rounds: int, batch: int) -> dict[str, Any]:
    spec_targets = targets(mock_url, gateway_url, key)
    per_round = []
    pooled: dict[str, list[float]] = {t["name"]: [] for t in spec_targets}
    for r in range(rounds):
        ttfb = one_round(spec_targets, batch)
        for name, sample in ttfb.items():
            pooled[name].extend(sample)
        per_round.append(added_ttfb(ttfb))
        print(
            f"round {r + 1}/{rounds}: added TTFB p50 "
            + ", ".join(f"{kind} {row['p50']:.3f} ms" for kind, row in per_round[-1].items())
        )
    figures = {}
    for kind in ("responses", "translated"):
        for point in ("p50",):  # a round's p99 rests on a handful of requests: pooled below
            figure = ab_verdict.compare(
                f"added TTFB {point}: {kind} vs chat",
                [row["chat"][point] for row in per_round],
                [row[kind][point] for row in per_round],
                ab_verdict.LOWER_IS_BETTER,
            )
            figures[f"{kind}_{point}"] = figure.as_dict()
    medians = {kind: median(row[kind]["p50"] for row in per_round) for kind in KINDS}
    return {"rounds": per_round, "median_added_p50_ms": medians, "pooled": added_ttfb(pooled), "figures": figures}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.responses_stream_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--batch", type=int, default=20, help="requests per target and batch, two a round")
    parser.add_argument("--cpu-requests", type=int, default=100, help="requests per kind and CPU phase (4 phases)")
    parser.add_argument("--out", type=Path, default=RESULTS / "responses-stream.json")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="switchboard-responses-bench-"))
    started: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        for upstream in (CHAT[1], RESPONSES[1]):
            script = {"model": upstream, "steps": [], "then": {"frames": FRAMES}}
            status, _ = procs.http("POST", f"{mock_url}/_control/script", orjson.dumps(script))
            if status != 200:
                raise RuntimeError(f"scripting the mock failed: {status}")
        doc = yaml.safe_dump(document(mock_url), sort_keys=False)
        env, key = procs.prepare_database(work, "responses", doc, config.ORG, config.AGENT)
        proc, url = procs.start_gateway(serve_commands.DEFAULT, "gateway", work, env)
        started.append(proc)
        result = measure(mock_url, url, key, args.rounds, args.batch)
        spec_targets = targets(mock_url, url, key)
        result["gateway_cpu_ms_per_request"] = cpu_per_request(spec_targets, proc.pid, args.cpu_requests, 4)
    finally:
        for proc in reversed(started):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["meta"] = {"server": serve_commands.DEFAULT, "frames": FRAMES, "cpus": os.cpu_count()}
    for kind, row in result["pooled"].items():
        print(
            f"all rounds, {kind:<10}: added TTFB p50 {row['p50']:.3f} ms, p99 {row['p99']:.3f} ms ({row['n']} requests)"
        )
    cpu = ", ".join(f"{kind} {ms:.3f}" for kind, ms in result["gateway_cpu_ms_per_request"].items())
    print(f"gateway CPU ms per streamed request (median of 4 phases): {cpu}")
    for name, figure in result["figures"].items():
        print(
            f"{name:<16} chat {figure['base_median']:.3f} ms, {name.split('_')[0]} {figure['head_median']:.3f} ms "
            f"({figure['difference']:+.3f}): {figure['verdict']}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    summary.save("responses_stream", result)


if __name__ == "__main__":
    main()
