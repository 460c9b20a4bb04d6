"""`python -m bench.workers_bench`: throughput of `serve --workers 1` vs `--workers 2` (same run).

Starts the mock upstream and two gateways on their own throwaway SQLite databases,
`manage.py serve --workers 1` and `manage.py serve --workers 2` (uvicorn by default),
both idle while the other is measured. wrk drives each at 8, 32 and 128 connections,
alternating, `--reps` times; the best run of each side is kept (other tenants of a
shared machine only slow a run down) and the ratio workers-2 / workers-1 is printed.
With `--redis URL`, one more pair: `--workers 1` with REDIS_URL (sharing on) vs
without, the p50 each adds (sharing must cost the request path nothing measurable).

Expect little gain on a 2-core machine: the mock upstream, wrk and the workers share
the same two cores, so the second worker mostly competes with them. Results go to
bench/results/workers.json.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import config, procs, summary
from bench.stats import ratio

RESULTS = Path(__file__).resolve().parent / "results"
LEVELS = (8, 32, 128)  # the scaling curve; the target is read at 128 clients
TARGET_AT_128 = 1.5  # --workers 2 / --workers 1 req/s


def _serve(name: str, server: str, workers: int, work: Path, mock_url: str, extra: dict[str, str]) -> tuple:
    env, key = procs.prepare_database(work, name, config.config_yaml(mock_url), config.ORG, config.AGENT)
    port = procs.free_port()
    argv = [procs.PY, "manage.py", "serve", "--server", server, "--workers", str(workers), "--port", str(port)]
    secret = {"SECRET_KEY": secrets.token_urlsafe(50)}  # `serve` refuses the development key
    proc = procs.Proc(
        name, argv, work, {"DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env, **secret, **extra}
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_http(f"{url}/health", proc, timeout=90)
    return proc, url, key


def measure(
    targets: dict[str, tuple[str, str]], levels: tuple[int, ...], seconds: float, reps: int, work: Path
) -> dict[str, Any]:
    """wrk on each target at each level, alternating targets `reps` times; the best run of each."""
    body = config.chat_body(config.CHAT[0])
    for url, key in targets.values():  # warm pools, caches and every worker's connections
        procs.wrk(f"{url}/v1/chat/completions", body, {"Authorization": f"Bearer {key}"}, 16, 2, work)
    out: dict[str, Any] = {}
    for conns in levels:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
        for _ in range(reps):
            for name, (url, key) in targets.items():
                headers = {"Authorization": f"Bearer {key}"}
                runs[name].append(procs.wrk(f"{url}/v1/chat/completions", body, headers, conns, seconds, work))
        out[f"c{conns}"] = {
            name: {**max(results, key=lambda r: r["rps"]), "runs_rps": [r["rps"] for r in results]}
            for name, results in runs.items()
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workers_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one wrk run (default 5)")
    parser.add_argument("--reps", type=int, default=3, help="runs per side and level; the best is kept (default 3)")
    parser.add_argument("--redis", default="", help="also measure --workers 1 with this REDIS_URL vs without")
    parser.add_argument("--out", type=Path, default=RESULTS / "workers.json")
    args = parser.parse_args(argv)
    if not procs.have_wrk():
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="switchboard-workers-bench-"))
    started: list[procs.Proc] = []
    results: dict[str, Any] = {
        "meta": {"server": args.server, "cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())}
    }
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        targets = {}
        for workers in (1, 2):
            proc, url, key = _serve(f"workers{workers}", args.server, workers, work, mock_url, {})
            started.append(proc)
            targets[f"workers_{workers}"] = (url, key)
        time.sleep(1.0)
        rows = measure(targets, LEVELS, args.seconds, args.reps, work)
        for level in rows.values():
            level["ratio"] = ratio(level["workers_2"]["rps"], level["workers_1"]["rps"])
        results["workers"] = rows
        if args.redis:
            for p in started[1:]:
                p.stop()
            del started[1:]
            pair = {}
            for name, extra in (("redis_off", {}), ("redis_on", {"REDIS_URL": args.redis})):
                proc, url, key = _serve(name, args.server, 1, work, mock_url, extra)
                started.append(proc)
                pair[name] = (url, key)
            time.sleep(1.0)
            sharing = measure(pair, (32,), args.seconds, args.reps, work)["c32"]
            sharing["p50_added_ms"] = round(sharing["redis_on"]["p50_ms"] - sharing["redis_off"]["p50_ms"], 3)
            results["sharing"] = sharing
    finally:
        for p in reversed(started):
            p.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"serve --workers 1 vs 2 ({args.server}, {os.cpu_count()} CPUs, best of {args.reps} x {args.seconds:g} s)")
    print(
        f"{'clients':>8} {'w1 req/s':>10} {'w2 req/s':>10} {'w2/w1':>6} {'w1 p50':>8} {'w2 p50':>8} {'w1 p99':>8} {'w2 p99':>8}"
    )
    for level, row in results["workers"].items():
        one, two = row["workers_1"], row["workers_2"]
        print(
            f"{level[1:]:>8} {one['rps']:>10.0f} {two['rps']:>10.0f} {row['ratio']:>6.2f} "
            f"{one['p50_ms']:>7.2f}ms {two['p50_ms']:>7.2f}ms {one['p99_ms']:>7.2f}ms {two['p99_ms']:>7.2f}ms"
        )
    if "sharing" in results:
        s = results["sharing"]
        print(
            f"sharing (REDIS_URL) at 32 clients: p50 {s['redis_off']['p50_ms']:.2f} ms off, "
            f"{s['redis_on']['p50_ms']:.2f} ms on ({s['p50_added_ms']:+.2f} ms); "
            f"{s['redis_off']['rps']:.0f} vs {s['redis_on']['rps']:.0f} req/s"
        )
    errors = [
        f"{level} {name}: {r['errors']} errors"
        for level, row in results["workers"].items()
        for name, r in row.items()
        if isinstance(r, dict) and r.get("errors")
    ]
    for line in errors:
        print(f"note: {line}")
    at128 = results["workers"]["c128"]["ratio"]
    verdict = "ok" if at128 is not None and at128 >= TARGET_AT_128 else "MISS"
    print(f"w2/w1 at 128 clients: {at128} (target ≥ {TARGET_AT_128}): {verdict}")
    summary.save("workers", results)
    print(f"results written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
