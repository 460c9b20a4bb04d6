"""`python -m bench.responses_stream_bench`: the added time to first byte of each translated streamed path against streamed chat's, same run (docs/performance.md#responses-ttfb).

Starts the mock upstream and one gateway (its own throwaway SQLite database) and measures, one
client at a time and interleaved by bench.loadgen (so the machine's drift hits every target
alike), the time to the first body byte of streams of 20 text frames each. A kind is a gateway
target against the direct call it makes upstream:

* `chat`: a chat completion on an OpenAI link, against `direct chat` (the plain path, the reference);
* `responses`: `/v1/responses` on a link whose upstream speaks it (relayed, the commit held until
  the first delta), against `direct responses`;
* `translated`: `/v1/responses` on a chat-only link (chat chunks turned into Responses events),
  against `direct chat`;
* `messages-translated`: an Anthropic Messages client (`/v1/messages`, `anthropic-version`) on a
  chat-only link, against `direct chat`;
* `messages-relayed`: `/v1/messages` on an Anthropic link (the pass-through, held until the first
  content), against `direct messages` (the mock's own Messages stream);
* `chat-anthropic-structured`: chat with `response_format: json_schema` on an Anthropic link (the
  schema as a forced tool, its input streamed back as content), against `direct messages structured`,
  the forced-tool call it makes (the mock answers a forced tool in two JSON deltas, not 20);
* `chat-anthropic-reasoning`: chat with `reasoning_effort` on an Anthropic link (a thinking budget),
  against `direct messages`. Claude takes no forced tool with thinking on, so the gateway refuses the
  two fields together (400): they are two kinds;
* `responses-anthropic`: `/v1/responses` on an Anthropic link (Responses -> chat -> Messages and
  back), against `direct messages`.

Every target's stream is checked once before timing (status 200, the protocol's first and last
events, its count of text frames): a broken path fails the run instead of being timed.
Each round gives each kind its added p50 (gateway − its direct call); the verdict compares the
rounds of each kind's added p50 with chat's as `make bench-ab` does (bench.ab_verdict: "slower" only
when the ranges do not overlap). The added p50 and p99 over all rounds' requests are printed too,
and the gateway's CPU time per streamed request of each kind (phases of one kind at a time, read
from /proc): what the machine's other tenants cannot blur. `--kinds` picks a subset (chat, the
reference, always runs). Results go to bench/results/responses-stream.json.
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
STRUCTURED_FRAMES = 2  # tools.mock answers a forced tool call in two halves of its JSON
CHAT, RESPONSES, TRANSLATED = ("rs-chat", "rs-chat-up"), ("rs-responses", "rs-responses-up"), "rs-translated"
CLAUDE = ("rs-claude", "rs-claude-up")  # an Anthropic-dialect link and its upstream model
ANTHROPIC_VERSION = "2023-06-01"
STRUCTURED_TOOL = "switchboard_json_output"  # routing.upstream.translate.anthropic_structured's tool
SCHEMA = {
    "type": "object",
    "properties": {"greeting": {"type": "string"}, "words": {"type": "integer"}},
    "required": ["greeting", "words"],
    "additionalProperties": False,
}
# kind -> (its gateway target, the direct target it is measured against)
KINDS = {
    "chat": ("gateway chat", "direct chat"),
    "responses": ("gateway responses", "direct responses"),
    "translated": ("gateway translated", "direct chat"),
    "messages-translated": ("gateway messages translated", "direct chat"),
    "messages-relayed": ("gateway messages relayed", "direct messages"),
    "chat-anthropic-structured": ("gateway chat anthropic structured", "direct messages structured"),
    "chat-anthropic-reasoning": ("gateway chat anthropic reasoning", "direct messages"),
    "responses-anthropic": ("gateway responses anthropic", "direct messages"),
}
REFERENCE = "chat"
# target -> (the protocol of its stream, the text frames it must carry)
EXPECTED = {
    "direct chat": ("chat", FRAMES),
    "gateway chat": ("chat", FRAMES),
    "direct responses": ("responses", FRAMES),
    "gateway responses": ("responses", FRAMES),
    "gateway translated": ("responses", FRAMES),
    "gateway messages translated": ("messages", FRAMES),
    "direct messages": ("messages", FRAMES),
    "gateway messages relayed": ("messages", FRAMES),
    "direct messages structured": ("messages", STRUCTURED_FRAMES),
    "gateway chat anthropic structured": ("chat", STRUCTURED_FRAMES),
    "gateway chat anthropic reasoning": ("chat", FRAMES),
    "gateway responses anthropic": ("responses", FRAMES),
}


def document(mock_url: str) -> dict[str, Any]:
    streaming = {"provider": "mock", "context_window": 128000}
    return {
        "providers": [
            {"name": "mock", "dialect": "openai", "base_url": f"{mock_url}/v1"},
            {"name": "claude", "dialect": "anthropic", "base_url": f"{mock_url}/anthropic/v1"},
        ],
        "models": [
            {"id": CHAT[0], "upstream_model": CHAT[1], "capabilities": ["chat", "streaming"], **streaming},
            {
                "id": RESPONSES[0],
                "upstream_model": RESPONSES[1],
                "capabilities": ["chat", "responses", "streaming"],
                **streaming,
            },
            {"id": TRANSLATED, "upstream_model": CHAT[1], "capabilities": ["chat", "streaming"], **streaming},
            {
                "id": CLAUDE[0],
                "upstream_model": CLAUDE[1],
                "capabilities": ["chat", "streaming", "reasoning", "structured_output"],
                **streaming,
                "provider": "claude",
            },
        ],
        "orgs": [{"name": config.ORG, "agents": [{"name": config.AGENT}]}],
    }


def _json(body: dict[str, Any]) -> str:
    return orjson.dumps(body).decode()


def _messages_body(model: str, **extra: Any) -> str:
    hello = [{"role": "user", "content": "Say hello."}]
    return _json({"model": model, "max_tokens": 256, "messages": hello, "stream": True, **extra})


def _chat_body(model: str, **extra: Any) -> str:
    return _json({"model": model, "messages": [{"role": "user", "content": "Say hello."}], "stream": True, **extra})


def targets(mock_url: str, gateway_url: str, key: str, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """The loadgen targets the `kinds` (default all) need, each direct call once."""

    def responses_body(model: str) -> str:
        return _json({"model": model, "input": "Say hello.", "stream": True})

    auth = {"Authorization": f"Bearer {key}"}
    anthropic = {"anthropic-version": ANTHROPIC_VERSION}
    fmt = {"type": "json_schema", "json_schema": {"name": "greeting", "schema": SCHEMA, "strict": True}}
    forced = {
        "tools": [{"name": STRUCTURED_TOOL, "description": "The answer, as JSON.", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": STRUCTURED_TOOL},
    }
    direct, gateway = mock_url, gateway_url
    every = [
        ("direct chat", direct, "/v1/chat/completions", {}, config.chat_body(CHAT[1], True)),
        ("gateway chat", gateway, "/v1/chat/completions", auth, config.chat_body(CHAT[0], True)),
        ("direct responses", direct, "/v1/responses", {}, responses_body(RESPONSES[1])),
        ("gateway responses", gateway, "/v1/responses", auth, responses_body(RESPONSES[0])),
        ("gateway translated", gateway, "/v1/responses", auth, responses_body(TRANSLATED)),
        (
            "gateway messages translated",
            gateway,
            "/v1/messages",
            {"x-api-key": key, **anthropic},
            _messages_body(TRANSLATED),
        ),
        ("direct messages", direct, "/anthropic/v1/messages", anthropic, _messages_body(CLAUDE[1])),
        (
            "gateway messages relayed",
            gateway,
            "/v1/messages",
            {"x-api-key": key, **anthropic},
            _messages_body(CLAUDE[0]),
        ),
        (
            "direct messages structured",
            direct,
            "/anthropic/v1/messages",
            anthropic,
            _messages_body(CLAUDE[1], **forced),
        ),
        (
            "gateway chat anthropic structured",
            gateway,
            "/v1/chat/completions",
            auth,
            _chat_body(CLAUDE[0], response_format=fmt),
        ),
        (
            "gateway chat anthropic reasoning",
            gateway,
            "/v1/chat/completions",
            auth,
            _chat_body(CLAUDE[0], reasoning_effort="low"),
        ),
        ("gateway responses anthropic", gateway, "/v1/responses", auth, responses_body(CLAUDE[0])),
    ]
    wanted = {name for kind in (kinds or list(KINDS)) for name in KINDS[kind]}
    return [
        {"name": name, "url": base + path, "body": body} | ({"headers": headers} if headers else {})
        for name, base, path, headers, body in every
        if name in wanted
    ]


def _events(raw: bytes) -> list[dict[str, Any] | str]:
    """An SSE body's data payloads in order: the JSON objects, `[DONE]` as a string."""
    out: list[dict[str, Any] | str] = []
    for frame in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:"))
        if data:
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def _text_frames(protocol: str, events: list[dict[str, Any] | str]) -> tuple[str, str, int]:
    """(first event, last event, text frames) of a stream in `protocol`."""
    objects = [e for e in events if isinstance(e, dict)]
    if protocol == "chat":
        pieces = [c["choices"][0]["delta"].get("content") for c in objects if c.get("choices")]
        text = [p for p in pieces if p]
        if text and text[0].startswith("{"):  # a structured answer: its deltas must join into JSON
            orjson.loads("".join(text))
        last = "[DONE]" if events and events[-1] == "[DONE]" else "no [DONE]"
        return "chunk" if objects else "none", last, len(text)
    types = [str(e.get("type")) for e in objects]
    if protocol == "responses":
        return types[0], types[-1], types.count("response.output_text.delta")
    deltas = [e["delta"].get("type") for e in objects if e.get("type") == "content_block_delta"]
    return types[0], types[-1], sum(d in ("text_delta", "input_json_delta") for d in deltas)


BOUNDS = {
    "chat": ("chunk", "[DONE]"),
    "responses": ("response.created", "response.completed"),
    "messages": ("message_start", "message_stop"),
}


def check_streams(spec_targets: list[dict[str, Any]]) -> None:
    """One request a target before any timing: status 200 and the protocol's stream of the expected
    frames, else the run stops here, naming the target (a broken path must not be timed)."""
    for target in spec_targets:
        name = target["name"]
        headers = {"Content-Type": "application/json", **target.get("headers", {})}
        status, raw = procs.http("POST", target["url"], target["body"].encode(), headers, timeout=30)
        protocol, frames = EXPECTED[name]
        if status != 200:
            raise RuntimeError(f"{name} answered {status}: {raw[:300]!r}")
        try:
            seen = _text_frames(protocol, _events(raw))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise RuntimeError(f"{name} did not stream {protocol} events ({exc!r}): {raw[:300]!r}") from exc
        if seen != (*BOUNDS[protocol], frames):
            want = (*BOUNDS[protocol], frames)
            raise RuntimeError(f"{name}: (first, last, text frames) {seen}, expected {want}: {raw[:300]!r}")


def added_ttfb(ttfb: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per kind measured: the added TTFB p50 and p99 (ms, gateway − its direct call) and the requests measured."""
    out: dict[str, dict[str, float]] = {}
    for kind, (through, direct) in KINDS.items():
        if through not in ttfb:
            continue
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
    kinds = {through_name: kind for kind, (through_name, _) in KINDS.items() if through_name in through}
    return {kinds[name]: round(median(values), 3) for name, values in spent.items()}


def measure(mock_url: str, gateway_url: str, key: str, rounds: int, batch: int, kinds: list[str]) -> dict[str, Any]:
    spec_targets = targets(mock_url, gateway_url, key, kinds)
    check_streams(spec_targets)
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
    for kind in kinds:
        if kind == REFERENCE:
            continue
        for point in ("p50",):  # a round's p99 rests on a handful of requests: pooled below
            figure = ab_verdict.compare(
                f"added TTFB {point}: {kind} vs chat",
                [row[REFERENCE][point] for row in per_round],
                [row[kind][point] for row in per_round],
                ab_verdict.LOWER_IS_BETTER,
            )
            figures[f"{kind}_{point}"] = figure.as_dict()
    medians = {kind: median(row[kind]["p50"] for row in per_round) for kind in kinds}
    return {"rounds": per_round, "median_added_p50_ms": medians, "pooled": added_ttfb(pooled), "figures": figures}


def kinds_of(text: str) -> list[str]:
    """The --kinds list in KINDS' order, chat (every verdict's reference) always among them."""
    asked = {name.strip() for name in text.split(",") if name.strip()}
    unknown = asked - set(KINDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown kinds {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    return [kind for kind in KINDS if kind in asked or kind == REFERENCE]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Mock, database, gateway; the checked streams, the rounds, the CPU phases; everything stopped after."""
    work = Path(tempfile.mkdtemp(prefix="switchboard-responses-bench-"))
    started: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        for upstream in (CHAT[1], RESPONSES[1], CLAUDE[1]):
            script = {"model": upstream, "steps": [], "then": {"frames": FRAMES}}
            status, _ = procs.http("POST", f"{mock_url}/_control/script", orjson.dumps(script))
            if status != 200:
                raise RuntimeError(f"scripting the mock failed: {status}")
        doc = yaml.safe_dump(document(mock_url), sort_keys=False)
        env, key = procs.prepare_database(work, "responses", doc, config.ORG, config.AGENT)
        proc, url = procs.start_gateway(serve_commands.DEFAULT, "gateway", work, env)
        started.append(proc)
        result = measure(mock_url, url, key, args.rounds, args.batch, args.kinds)
        spec_targets = targets(mock_url, url, key, args.kinds)
        result["gateway_cpu_ms_per_request"] = cpu_per_request(spec_targets, proc.pid, args.cpu_requests, 4)
    finally:
        for proc in reversed(started):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["meta"] = {"server": serve_commands.DEFAULT, "frames": FRAMES, "cpus": os.cpu_count(), "kinds": args.kinds}
    return result


def report(result: dict[str, Any]) -> None:
    width = max(10, *(len(kind) for kind in result["pooled"]))
    for kind, row in result["pooled"].items():
        print(
            f"all rounds, {kind:<{width}}: added TTFB p50 {row['p50']:.3f} ms, p99 {row['p99']:.3f} ms ({row['n']} requests)"
        )
    cpu = ", ".join(f"{kind} {ms:.3f}" for kind, ms in result["gateway_cpu_ms_per_request"].items())
    print(f"gateway CPU ms per streamed request (median of 4 phases): {cpu}")
    for name, figure in result["figures"].items():
        print(
            f"{name:<{width + 4}} chat {figure['base_median']:.3f} ms, {name.split('_')[0]} {figure['head_median']:.3f} ms "
            f"({figure['difference']:+.3f}): {figure['verdict']}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.responses_stream_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--batch", type=int, default=20, help="requests per target and batch, two a round")
    parser.add_argument("--cpu-requests", type=int, default=100, help="requests per kind and CPU phase (4 phases)")
    parser.add_argument(
        "--kinds", type=kinds_of, default=list(KINDS), help=f"comma-separated subset (default all: {','.join(KINDS)})"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "responses-stream.json")
    args = parser.parse_args(argv)
    result = run(args)
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    summary.save("responses_stream", result)


if __name__ == "__main__":
    main()
