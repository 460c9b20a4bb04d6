"""`python -m bench.tracing_bench`: what tracing adds to a request (docs/tracing.md#cost).

In process: the gateway's ASGI handler called directly (httpx's ASGI transport) against
the mock upstream on loopback, one chat request at a time. Rounds alternate tracing
off and on (spans batched to an exporter that drops them, so the network is not
measured), and the p50 of each mode over all rounds is printed, with the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import time
from typing import Any


async def _run(requests: int, rounds: int) -> dict[str, list[float]]:
    import httpx
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from gateway_project.process import build_process, make_gateway
    from routing.config import live
    from routing.config.snapshot import build_snapshot
    from routing.runtime.observe import tracing
    from tools.mock.upstream import start_mock

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    process = build_process(background=False)
    gateway_application = make_gateway(process)
    runner, port = await start_mock(0)
    key = "sb-bench-tracing-0123456789"
    doc = {
        "providers": [{"name": "mock", "base_url": f"http://127.0.0.1:{port}/v1"}],
        "models": [{"id": "m", "provider": "mock", "upstream_model": "bench-m", "capabilities": ["chat"]}],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }
    rows = [{"key_hash": hashlib.sha256(key.encode()).hexdigest(), "prefix": key[:10], "org": "acme",
             "agent": "bot", "expires_at": None}]  # fmt: skip
    live.swap(build_snapshot(doc, rows, {}, version=1))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {
        "Authorization": f"Bearer {key}",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    times: dict[str, list[float]] = {"off": [], "on": []}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application), base_url="http://gw") as c:
        for _ in range(50):  # warm the pools and caches
            await c.post("/v1/chat/completions", json=body, headers=headers)
        for _ in range(rounds):
            for mode in ("off", "on"):
                if mode == "on":
                    tracing.configure(processor=BatchSpanProcessor(Drop()))
                for _ in range(requests):
                    start = time.perf_counter()
                    response = await c.post("/v1/chat/completions", json=body, headers=headers)
                    times[mode].append(time.perf_counter() - start)
                    assert response.status_code == 200
                if mode == "on":
                    tracing.shutdown()
    await process.transport.aclose()
    await runner.cleanup()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300, help="requests per round and mode")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import logging

    import django

    django.setup()
    logging.getLogger("switchboard").setLevel(logging.WARNING)
    times = asyncio.run(_run(args.requests, args.rounds))
    off, on = statistics.median(times["off"]) * 1e6, statistics.median(times["on"]) * 1e6
    print(f"requests per mode: {len(times['off'])}; p50 in microseconds")
    print(f"tracing off: {off:8.1f}")
    print(f"tracing on:  {on:8.1f}  (+{on - off:.1f}, {100 * (on - off) / off:+.1f}%)")


if __name__ == "__main__":
    main()
