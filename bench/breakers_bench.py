"""`python -m bench.breakers_bench`: what org views and shared breakers cost a request.

1. timeit, best of several repeats, in nanoseconds per call: `BreakerRegistry.admit` on a
   link whose breaker exists and is closed, without an org (the rule before org views)
   and with one (an org with no view, and an org whose closed view has a failure).
2. End to end (docs/scale-out.md#shared-breakers): two real gateway processes on loopback
   in front of the mock upstream, one sharing breakers over a redis-server of its own and
   one without Redis; sequential keep-alive requests, interleaved in rounds so machine
   noise hits both alike; p50 of each and the difference. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import timeit
from pathlib import Path


def micro(number: int, repeat: int) -> None:
    from routing.core.breaker import BreakerKey, BreakerRegistry

    key = BreakerKey("p", "m")
    reg = BreakerRegistry()
    reg.record_failure(key, 0, 5, 30.0, "a")  # the breaker and a's view exist, both closed
    cases = {
        "admit, no org": lambda: reg.admit(key, 5, 30.0),
        "admit, org without a view": lambda: reg.admit(key, 5, 30.0, "b"),
        "admit, org with a closed view": lambda: reg.admit(key, 5, 30.0, "a"),
    }
    for name, fn in cases.items():
        best = min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9
        print(f"{name:32s} {best:7.0f} ns")


CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: b
    provider: mock
    upstream_model: up-b
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def end_to_end(rounds: int, per_round: int) -> None:
    import httpx

    from tests.e2e.harness import Databases, Gateway, MockUpstream, RedisServer

    mock, dbs, redis = MockUpstream(), Databases(), RedisServer()
    gateways = {}
    try:
        for name, env in (("sharing (Redis up)", {"REDIS_URL": redis.url}), ("no Redis", {"REDIS_URL": ""})):
            gw = Gateway(dbs.new(), CONFIG.format(mock=mock.url), Path(tempfile.mkdtemp()), env)
            gw.start()
            gateways[name] = gw
        samples: dict[str, list[float]] = {name: [] for name in gateways}
        body = {"model": "b", "messages": [{"role": "user", "content": "hi"}]}
        clients = {
            name: httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20)
            for name, gw in gateways.items()
        }
        for _ in range(rounds):
            for name, client in clients.items():
                for _ in range(per_round):
                    started = time.perf_counter()
                    client.post("/v1/chat/completions", json=body).raise_for_status()
                    samples[name].append(time.perf_counter() - started)
        p50 = {name: statistics.median(s) * 1000 for name, s in samples.items()}
        for name, value in p50.items():
            print(f"p50 {name:20s} {value:.3f} ms  ({len(samples[name])} requests)")
        names = list(p50)
        print(f"sharing adds {p50[names[0]] - p50[names[1]]:+.3f} ms at p50")
    finally:
        for gw in gateways.values():
            gw.stop()
        redis.stop()
        mock.stop()
        dbs.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    micro(args.number, args.repeat)
    end_to_end(args.rounds, args.per_round)


if __name__ == "__main__":
    main()
