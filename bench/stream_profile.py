"""`python -m bench.stream_profile`: where a streamed request's time goes before its first byte (docs/performance.md#first-frame).

Starts the mock upstream, prepares a throwaway SQLite database, and drives the ASGI
application in this process (no server: scope, receive and send are in-process, as
bench.callcount) with one client, sequentially, over three streamed paths:

* `chat`: a streamed chat completion on an OpenAI-dialect link (pass-through);
* `responses`: a streamed `/v1/responses` on a link whose upstream speaks it (relayed);
* `anthropic`: a streamed chat completion on an Anthropic-dialect link (translated).

For each it reports the window from the application being called to the first
`http.response.body` message leaving it (what a client's time to first byte adds):

* Python function calls in the window per request (`cProfile`, deterministic: the
  machine's load does not move them), top 20 by calls and top 20 by own time;
* Python calls and own time by package (routing/'s packages, aiohttp, asyncio, C built-ins);
* the window split in phases (wall µs, each phase's median per round, the minimum over
  rounds, without the profiler): request in -> upstream request handed to aiohttp
  (`before_upstream`) -> its status and headers in (`upstream_headers`: aiohttp's request
  and the write, the mock's own time, the loopback) -> the first body chunk read
  (`first_chunk`) -> `http.response.start` (`to_response_start`: the commit, the tap, the
  journal, the headers) -> the first body message (`to_first_byte`); and `loop_cpu`, the
  event loop thread's CPU time in the window (`time.thread_time`).

`--frame-delay-ms 0` (the default) is `make bench`'s mock: the whole stream comes in a burst,
so much of it is in the gateway's first read; `--frame-delay-ms 1` paces the frames as a
model does, so the first read holds the role chunk and the first content frame.

    DJANGO_SETTINGS_MODULE=gateway_project.settings \\
        .venv/bin/python -m bench.stream_profile --requests 300 --rounds 5 [--kinds chat,anthropic] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import orjson
import yaml

from bench import config, procs

FRAMES = 20
PHASES = ("before_upstream", "upstream_headers", "first_chunk", "to_response_start", "to_first_byte", "loop_cpu")
KINDS: dict[str, tuple[str, str]] = {  # kind -> (path, model id)
    "chat": ("/v1/chat/completions", "sp-chat"),
    "responses": ("/v1/responses", "sp-responses"),
    "anthropic": ("/v1/chat/completions", "sp-anthropic"),
}


def document(mock_url: str) -> dict[str, Any]:
    both = {"context_window": 128000}
    return {
        "providers": [
            {"name": "mock", "dialect": "openai", "base_url": f"{mock_url}/v1"},
            {"name": "claude", "dialect": "anthropic", "base_url": f"{mock_url}/anthropic/v1"},
        ],
        "models": [
            {"id": "sp-chat", "provider": "mock", "upstream_model": "sp-up", "capabilities": ["chat", "streaming"]}
            | both,
            {
                "id": "sp-responses",
                "provider": "mock",
                "upstream_model": "sp-up",
                "capabilities": ["chat", "responses", "streaming"],
            }
            | both,
            {
                "id": "sp-anthropic",
                "provider": "claude",
                "upstream_model": "sp-claude",
                "capabilities": ["chat", "streaming"],
            }
            | both,
        ],
        "orgs": [{"name": config.ORG, "agents": [{"name": config.AGENT}]}],
    }


def body(kind: str) -> bytes:
    model = KINDS[kind][1]
    if kind == "responses":
        return orjson.dumps({"model": model, "input": "Say hello.", "stream": True})
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}], "stream": True})


def scope(path: str, key: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {key}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Window:
    """One request's first-frame window: its phase marks, and the profiler switched on inside it."""

    def __init__(self) -> None:
        self.profiler: cProfile.Profile | None = None
        self.marks: dict[str, float] = {}
        self.open = False
        self.cpu = 0.0  # the loop thread's CPU seconds in the window (after stop())

    def mark(self, name: str) -> None:
        if self.open and name not in self.marks:
            self.marks[name] = time.perf_counter()

    def start(self) -> None:
        self.cpu = time.thread_time()
        self.marks = {"start": time.perf_counter()}
        self.open = True
        if self.profiler is not None:
            self.profiler.enable()

    def stop(self) -> None:
        if self.profiler is not None:
            self.profiler.disable()
        self.marks["first_byte"] = time.perf_counter()
        self.cpu = time.thread_time() - self.cpu
        self.open = False

    def phases(self) -> dict[str, float] | None:
        m = self.marks
        needed = ("start", "sent", "headers", "first_chunk", "response_start", "first_byte")
        if not all(k in m for k in needed):
            return None
        return {
            "before_upstream": m["sent"] - m["start"],
            "upstream_headers": m["headers"] - m["sent"],
            "first_chunk": m["first_chunk"] - m["headers"],
            "to_response_start": m["response_start"] - m["first_chunk"],
            "to_first_byte": m["first_byte"] - m["response_start"],
            "loop_cpu": self.cpu,
        }


WINDOW = Window()


def instrument_transport() -> None:
    """Mark when the upstream request is handed to aiohttp and when its status line is in (bench only)."""
    from routing.upstream import transport

    original = transport.Transport.send

    async def send(self: Any, *args: Any, **kwargs: Any) -> Any:
        WINDOW.mark("sent")
        response = await original(self, *args, **kwargs)
        WINDOW.mark("headers")
        return response

    transport.Transport.send = send  # type: ignore[method-assign]
    iterate = transport.UpstreamResponse.iter_chunks

    async def iter_chunks(self: Any) -> Any:
        async for chunk in iterate(self):
            WINDOW.mark("first_chunk")
            yield chunk

    transport.UpstreamResponse.iter_chunks = iter_chunks  # type: ignore[method-assign]


async def one(app: Any, sc: dict[str, Any], payload: bytes) -> int:
    state = {"status": 0, "first": False, "sent": False}

    async def receive() -> dict[str, Any]:
        if not state["sent"]:
            state["sent"] = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
            WINDOW.mark("response_start")
        elif not state["first"] and message.get("body"):
            state["first"] = True
            WINDOW.stop()

    WINDOW.start()
    await app(sc, receive, send)
    if WINDOW.open:
        WINDOW.stop()
    return int(state["status"])


async def run_kind(app: Any, key: str, kind: str, warmup: int, requests: int, rounds: int) -> dict[str, Any]:
    path, _ = KINDS[kind]
    sc, payload = scope(path, key), body(kind)
    for _ in range(warmup):
        status = await one(app, sc, payload)
        if status != 200:
            raise SystemExit(f"{kind}: warm-up request answered {status}: check the configuration")
    # Wall-clock phases without the profiler: per round the median of each phase, then the min over rounds.
    per_round: list[dict[str, float]] = []
    for _ in range(rounds):
        samples: dict[str, list[float]] = {p: [] for p in PHASES}
        for _ in range(requests):
            await one(app, sc, payload)
            split = WINDOW.phases()
            if split is not None:
                for p, v in split.items():
                    samples[p].append(v)
        per_round.append({p: median(v) * 1e6 for p, v in samples.items() if v})
    wall = {p: round(min(r[p] for r in per_round), 1) for p in PHASES}
    # Calls and own time, under cProfile, only inside the windows.
    prof = cProfile.Profile()
    WINDOW.profiler = prof
    try:
        for _ in range(requests):
            await one(app, sc, payload)
    finally:
        WINDOW.profiler = None
    return {"wall_us_p50": wall, **calls_of(prof, requests)}


def calls_of(prof: cProfile.Profile, requests: int, top: int = 20) -> dict[str, Any]:
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    here = os.getcwd() + "/"

    def name(func: tuple[str, int, str]) -> str:
        file, line, fn = func
        file = file.replace(here, "")
        if "/site-packages/" in file:
            file = file.split("/site-packages/", 1)[1]
        return f"{file}:{line}:{fn}" if line else fn

    rows = [(name(f), nc, tt, ct) for f, (cc, nc, tt, ct, callers) in stats.items()]
    total = sum(r[1] for r in rows) / requests
    first_party = sum(r[1] for r in rows if r[0].startswith("routing/")) / requests

    def table(key: int, only_ours: bool = False) -> list[dict[str, Any]]:
        chosen = [r for r in rows if r[0].startswith("routing/")] if only_ours else rows
        ranked = sorted(chosen, key=lambda r: r[key], reverse=True)[:top]
        return [
            {
                "function": n,
                "calls": round(nc / requests, 2),
                "own_us": round(tt / requests * 1e6, 2),
                "cum_us": round(ct / requests * 1e6, 2),
            }
            for n, nc, tt, ct in ranked
        ]

    groups: dict[str, list[float]] = {}
    for n, nc, tt, _ in rows:
        group = package(n)
        calls_time = groups.setdefault(group, [0.0, 0.0])
        calls_time[0] += nc / requests
        calls_time[1] += tt / requests * 1e6
    return {
        "by_package": {g: [round(c, 1), round(t, 1)] for g, (c, t) in sorted(groups.items(), key=lambda i: -i[1][1])},
        "calls_per_request": round(total, 1),
        "first_party_calls": round(first_party, 1),
        "by_calls": table(1),
        "by_own_time": table(2),
        "ours_by_cumulative": table(3, only_ours=True),
    }


def package(function: str) -> str:
    """Which code a profiled function is: routing/'s modules by package, libraries by name, C built-ins."""
    if function.startswith("routing/"):
        return "/".join(function.split("/")[:2])
    if function.startswith("<") or ":" not in function:
        return "built-ins (C)"
    if "/python3." in function:
        return "stdlib: " + function.split("/python3.", 1)[1].split("/", 2)[1].split(":")[0]
    return function.split("/", 1)[0].split(":")[0]


def report(kind: str, result: dict[str, Any]) -> None:
    wall = result["wall_us_p50"]
    print(
        f"\n== {kind}: {result['calls_per_request']} calls before the first byte "
        f"({result['first_party_calls']} in routing/)"
    )
    print("   wall µs (p50, min of rounds): " + ", ".join(f"{p} {v}" for p, v in wall.items()))
    print("   calls and own µs by package: " + ", ".join(f"{g} {c}/{t}" for g, (c, t) in result["by_package"].items()))
    tables = (
        ("by calls", result["by_calls"]),
        ("by own time", result["by_own_time"]),
        ("routing/ by cumulative time", result["ours_by_cumulative"]),
    )
    for title, rows in tables:
        print(f"   top 20 {title} (calls/request, own µs, cumulative µs under the profiler):")
        for row in rows:
            print(f"   {row['calls']:>7} {row['own_us']:>8.2f} {row['cum_us']:>8.2f}  {row['function']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stream_profile", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=300, help="requests per round and for the profile")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument(
        "--frame-delay-ms",
        type=int,
        default=0,
        help="the mock's pause between frames (0, as `make bench`: the stream comes in a burst)",
    )
    p.add_argument("--json", action="store_true", help="one JSON line instead of the tables")
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    work = Path(tempfile.mkdtemp(prefix="switchboard-stream-profile-"))
    mock = None
    try:
        mock, mock_url = procs.start_mock(work)
        for model in ("sp-up", "sp-claude"):
            script = {"model": model, "steps": [], "then": {"frames": FRAMES, "frame_delay_ms": args.frame_delay_ms}}
            status, _ = procs.http("POST", f"{mock_url}/_control/script", orjson.dumps(script))
            if status != 200:
                raise SystemExit(f"scripting the mock failed: {status}")
        doc = yaml.safe_dump(document(mock_url), sort_keys=False)
        env, key = procs.prepare_database(work, "stream-profile", doc, config.ORG, config.AGENT)
        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
        # The request log line is written on the usage writer's thread, not in the profiled window: kept quiet
        # so the report is readable (SWITCHBOARD_REQUEST_LOG_LEVEL=INFO to keep it).
        os.environ.setdefault("SWITCHBOARD_REQUEST_LOG_LEVEL", "WARNING")
        sys.path.insert(0, os.getcwd())
        from gateway_project.asgi import application

        instrument_transport()
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run

        async def drive() -> dict[str, Any]:
            return {k: await run_kind(application, key, k, args.warmup, args.requests, args.rounds) for k in kinds}

        results = runner(drive())
    finally:
        if mock is not None:
            mock.stop()
    # `work` stays: the usage writer spools there at exit (a few KB in the temporary directory).
    if args.json:
        print(orjson.dumps(results).decode())
    else:
        for kind, result in results.items():
            report(kind, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
