"""`python -m bench.compare` (make bench-compare): what changed between two benchmark runs.

Compares bench/results/latest.json with bench/results/baseline.json (or --against FILE)
and prints before, after, delta and a verdict per headline metric. Changes under the
tolerance (default 20 %) read "same": two runs of the same code on this shared 2-core machine
differ by 10-40 % in tail and added-latency metrics (measured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from bench import report
from bench.run import RESULTS


def _load(path: Path) -> dict:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise SystemExit(f"{path} does not exist: run `make bench` first (or pass --against/--latest)") from None
    except orjson.JSONDecodeError as exc:
        raise SystemExit(f"{path} is not a benchmark results file: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    p.add_argument(
        "--against",
        type=Path,
        default=RESULTS / "baseline.json",
        help="the earlier results (default bench/results/baseline.json)",
    )
    p.add_argument(
        "--latest",
        type=Path,
        default=RESULTS / "latest.json",
        help="the newer results (default bench/results/latest.json)",
    )
    p.add_argument(
        "--tolerance", type=float, default=0.20, help="relative change below which a metric reads 'same' (default 0.20)"
    )
    p.add_argument("--all", action="store_true", help="every numeric metric, not only the headline ones")
    args = p.parse_args(argv)
    before, after = _load(args.against), _load(args.latest)
    entries = report.compare(before, after, tolerance=args.tolerance, everything=args.all)
    bm, am = before.get("meta", {}), after.get("meta", {})
    print(
        f"before: {args.against} (server {bm.get('server')}, commit {bm.get('commit')}, {bm.get('started')}, quick={bm.get('quick')})"
    )
    print(
        f"after:  {args.latest} (server {am.get('server')}, commit {am.get('commit')}, {am.get('started')}, quick={am.get('quick')})"
    )
    if not entries:
        print("no metric is present in both files (did they run different --only scenarios?)")
        return 1
    print(report.compare_table(entries))
    worse = [e["metric"] for e in entries if e["verdict"] == "worse"]
    better = [e["metric"] for e in entries if e["verdict"] == "better"]
    print(
        f"{len(better)} better, {len(worse)} worse, {len(entries) - len(better) - len(worse)} within {args.tolerance:.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
