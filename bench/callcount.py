"""`python -m bench.callcount`: Python function calls and CPU time per request, in process.

Wall-clock figures on a shared 2-core machine move with its load; the number of Python
function calls a request makes does not. This drives the ASGI application directly (no
server: scope, receive and send are in-process) against the real mock upstream, counts
every Python-level call made while `--requests` plain chat completions are answered
(`sys.setprofile`), and prints calls per request, CPU µs per request, and the functions
that make the most calls. Run it in two trees (`--json` for a machine-readable line) to
account for what a change added to the request path (docs/performance.md#calls).

It needs a prepared database: `DATABASE_URL` with the benchmark configuration imported
and `SWITCHBOARD_BENCH_KEY` set to an API key of it (bench/ab.py prepares both).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import Counter
from typing import Any

import orjson


def _scope(path: str, key: str) -> dict[str, Any]:
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


async def one(app: Any, scope: dict[str, Any], body: bytes) -> int:
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def drive(app: Any, key: str, model: str, warmup: int, requests: int, top: int) -> dict[str, Any]:
    scope = _scope("/v1/chat/completions", key)
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}]})
    for _ in range(warmup):
        status = await one(app, scope, body)
        if status != 200:
            raise SystemExit(f"warm-up request answered {status}: check the configuration and key")
    calls: Counter[tuple[str, str]] = Counter()

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            calls[(code.co_filename, code.co_name)] += 1

    sys.setprofile(profiler)
    try:
        for _ in range(requests):
            await one(app, scope, body)
    finally:
        sys.setprofile(None)
    cpu0 = time.process_time()
    for _ in range(requests):
        await one(app, scope, body)
    cpu_us = (time.process_time() - cpu0) / requests * 1e6
    total = sum(calls.values()) / requests
    here = os.getcwd()
    first_party = sum(n for (f, _), n in calls.items() if f.startswith(here) and "/.venv/" not in f) / requests
    rows = [
        {"calls": round(n / requests, 2), "function": f"{f.replace(here + '/', '')}:{name}"}
        for (f, name), n in calls.most_common(top)
    ]
    return {
        "calls_per_request": round(total, 1),
        "first_party": round(first_party, 1),
        "cpu_us": round(cpu_us, 1),
        "top": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.callcount", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--model", default="bench")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    key = os.environ.get("SWITCHBOARD_BENCH_KEY", "")
    if not key:
        raise SystemExit("set SWITCHBOARD_BENCH_KEY to an API key of the prepared database")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    sys.path.insert(0, os.getcwd())
    from gateway_project.asgi import application

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    result = runner(drive(application, key, args.model, args.warmup, args.requests, args.top))
    if args.json:
        print(orjson.dumps(result).decode())
        return 0
    print(
        f"calls/request {result['calls_per_request']} (first-party {result['first_party']}), CPU {result['cpu_us']} µs"
    )
    for row in result["top"]:
        print(f"{row['calls']:>8}  {row['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
