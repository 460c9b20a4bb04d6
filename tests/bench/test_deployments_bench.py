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


def test_the_command_make_bench_runs_starts_on_its_own_and_saves_its_result(tmp_path) -> None:
    """`python -m bench.deployments_bench` as `make bench` runs it: a fresh interpreter, Django set up by the
    command itself (it failed at its first import while only the in-process test above ran)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["SWITCHBOARD_BENCH_RUN_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "bench.deployments_bench", "--runs", "100", "--requests", "160"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "worst added p50" in out.stdout
    saved = json.loads((tmp_path / "deployments.json").read_text())
    assert set(saved["cost_us"]) == {"single", "weighted", "least_busy", "latency", "pick_weighted"}
