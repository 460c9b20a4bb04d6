"""The deployments benchmark runs and reports every strategy (bench/deployments_bench.py)."""

from __future__ import annotations

import asyncio

from bench import deployments_bench


def test_cost_and_distribution_are_measured_for_each_strategy() -> None:
    cost = asyncio.run(deployments_bench._cost(200))
    assert set(cost) == {"single", "weighted", "least_busy", "latency", "pick_weighted"}
    assert all(v > 0 for v in cost.values())
    dist = asyncio.run(deployments_bench._distribution(320))
    assert all(sum(d.values()) == 320 for d in dist.values())
    weighted = dist["weighted"]
    assert weighted["d1"] > weighted["d4"]  # 4:3:2:1
    assert dist["latency"]["d1"] > dist["latency"]["d4"]  # 1 ms beats 8 ms
