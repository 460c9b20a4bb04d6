"""`python -m bench.deployments_bench`: what picking a deployment costs, and where traffic goes (docs/deployments.md#cost).

1. Cost: the executor's whole run over a chain of one link, with an upstream call that
   answers at once, for a one-provider model and for a 4-deployment model under each
   strategy; p50 of single runs (ns clock), in microseconds, and the difference = what
   selection adds per request (target: at most 20 µs at p50). Also one `Picker.pick`.
2. Distribution: where 4 000 requests land per strategy, with simulated upstreams
   (weights 4:3:2:1 for `weighted`; answer times 1, 2, 4, 8 ms for `least_busy` with 16
   concurrent callers and for `latency`).

Both runs are in the same process, so the ratio holds on a loaded machine even when the
absolute figures move.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from bench import summary

NAMES = ("d1", "d2", "d3", "d4")


def _links(routing: str, weights: tuple[int, ...] = (1, 1, 1, 1)) -> tuple[Any, Any]:
    from routing.config.snapshot import ModelSpec, ProviderSpec, Timeouts
    from routing.core.breaker import BreakerKey
    from routing.core.executor import Link
    from routing.core.picking import Target

    def provider(name: str) -> ProviderSpec:
        return ProviderSpec(name, "openai", f"http://127.0.0.1:1/{name}", None, None, None, None, None, "", False)

    base = ModelSpec(
        id="m",
        provider=provider("solo"),
        upstream_model="m",
        capabilities=frozenset({"chat"}),
        context_window=None,
        max_output_tokens=None,
        residency="",
        input_price_per_mtok=None,
        output_price_per_mtok=None,
        fallbacks=(),
        timeouts=Timeouts(5000, 30000, 60000, 600000),
        fallback_on=frozenset({"provider_error"}),
    )
    single = Link(base, BreakerKey("solo", "m"), "http://127.0.0.1:1/solo", None)
    targets = []
    for name, weight in zip(NAMES, weights, strict=True):
        view = replace(base, provider=provider(name))
        targets.append(Target(Link(view, BreakerKey(name, "m"), view.provider.base_url, None), weight))
    first = targets[0].link
    multi = Link(base, first.breaker_key, first.base_url, None, None, tuple(targets), routing)
    return single, multi


def _p50_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000.0


async def _cost(runs: int) -> dict[str, float]:
    from routing.core.breaker import BreakerRegistry
    from routing.core.executor import Executor
    from routing.core.picking import Picker
    from routing.core.resilience import Resilience
    from routing.core.retry_budget import RetryBudgets

    res = Resilience()
    rng = random.Random(1)
    out: dict[str, float] = {}

    async def attempt(link: Any, deadline: float) -> str:
        return "ok"

    for routing in ("weighted", "least_busy", "latency"):
        single, multi = _links(routing)
        for label, chain in (("single", [single]), (routing, [multi])):
            if label == "single" and "single" in out:
                continue
            ex = Executor(BreakerRegistry(), RetryBudgets(), rand=rng.random, picker=Picker())
            ns = time.perf_counter_ns
            samples = []
            deadline = time.monotonic() + 3600
            for _ in range(runs):
                t0 = ns()
                await ex.run(chain, attempt, res, deadline)
                samples.append(ns() - t0)
            out[label] = _p50_us(samples)

    from routing.core.picking import Picker

    bal = Picker()
    _, multi = _links("weighted")
    pick, targets, draw = bal.pick, multi.deployments, rng.random
    t0 = time.perf_counter_ns()
    for _ in range(runs):
        pick("weighted", targets, draw)
    out["pick_weighted"] = (time.perf_counter_ns() - t0) / runs / 1000.0
    return out


async def _distribution(requests: int) -> dict[str, dict[str, int]]:
    from routing.core.breaker import BreakerRegistry
    from routing.core.executor import Executor
    from routing.core.picking import Picker
    from routing.core.resilience import Resilience
    from routing.core.retry_budget import RetryBudgets

    res = Resilience()
    answer_s = {"d1": 0.001, "d2": 0.002, "d3": 0.004, "d4": 0.008}
    out: dict[str, dict[str, int]] = {}
    for routing, weights in (("weighted", (4, 3, 2, 1)), ("least_busy", (1, 1, 1, 1)), ("latency", (1, 1, 1, 1))):
        _, multi = _links(routing, weights)
        ex = Executor(BreakerRegistry(), RetryBudgets(), rand=random.Random(2).random, picker=Picker())
        callers = 16 if routing != "weighted" else 1
        served = await _serve(ex, multi, res, requests, callers, None if routing == "weighted" else answer_s)
        out[routing] = {name: served[name] for name in NAMES}
    return out


async def _serve(
    ex: Any, link: Any, res: Any, requests: int, callers: int, answer_s: dict[str, float] | None
) -> Counter[str]:
    """`requests` runs of the executor over `link` by `callers` concurrent callers; who served."""
    served: Counter[str] = Counter()

    async def attempt(lk: Any, deadline: float) -> str:
        if answer_s is not None:
            await asyncio.sleep(answer_s[lk.model.provider.name])
        return "ok"

    async def caller(n: int) -> None:
        for _ in range(n):
            outcome = await ex.run([link], attempt, res, time.monotonic() + 600)
            served[outcome.link.model.provider.name] += 1

    await asyncio.gather(*(caller(requests // callers) for _ in range(callers)))
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20000, help="executor runs per variant (cost)")
    parser.add_argument("--requests", type=int, default=4000, help="requests per strategy (distribution)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import django

    django.setup()  # the snapshot's types import the models (routing.config.secrets)

    cost = asyncio.run(_cost(args.runs))
    print("selection cost (executor run, p50 of single runs, µs):")
    print(f"  single deployment      {cost['single']:7.2f}")
    worst = 0.0
    for routing in ("weighted", "least_busy", "latency"):
        added = cost[routing] - cost["single"]
        worst = max(worst, added)
        print(f"  4 deployments {routing:<10} {cost[routing]:7.2f}   added {added:+6.2f}")
    print(f"  Picker.pick weighted {cost['pick_weighted']:7.2f} (mean)")
    print(f"  worst added p50: {worst:.2f} µs (target ≤ 20 µs): {'ok' if worst <= 20 else 'OVER'}")
    summary.save("deployments", {"cost_us": cost, "worst_added_us": round(worst, 3), "target_us": 20})

    dist = asyncio.run(_distribution(args.requests))
    print(f"distribution over {args.requests} requests:")
    print("  weighted 4:3:2:1           " + "  ".join(f"{n} {dist['weighted'][n]:5d}" for n in NAMES))
    print("  least_busy (1/2/4/8 ms)    " + "  ".join(f"{n} {dist['least_busy'][n]:5d}" for n in NAMES))
    print("  latency    (1/2/4/8 ms)    " + "  ".join(f"{n} {dist['latency'][n]:5d}" for n in NAMES))


if __name__ == "__main__":
    main()
