"""`python -m bench.run` (make bench): measure what the gateway adds over calling the mock directly.

Starts, on loopback and each in its own process: the mock upstream, a gateway on a
throwaway SQLite database (migrate + import_config + create_api_key, like an operator),
and the load generators (bench.loadgen for per-request timing, wrk for throughput).
Prints one table and writes bench/results/latest.json for `python -m bench.compare`.
The whole run is bounded (about 5 minutes, --quick about 1); every number that compares
the gateway with the mock comes from the same run, because the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import config, procs, report
from bench.scenarios import SCENARIOS, Bench, Peer
from gateway_project import servers as serve_commands

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET_S = 290.0
# rough seconds each scenario needs (full, quick), so the run skips what would overrun the budget
ESTIMATE_S = {
    "memory": (30, 25),
    "latency": (40, 10),
    "stream": (20, 8),
    "throughput": (60, 30),
    "config": (60, 40),
    "storm": (50, 50),
}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=procs.ROOT, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter runs (about 60 s); noisier numbers")
    p.add_argument(
        "--server",
        choices=procs.SERVERS,
        default=serve_commands.DEFAULT,
        help="ASGI server for the gateway (default: %(default)s, the default run command)",
    )
    p.add_argument("--only", default="", help=f"comma-separated scenarios to run, from: {', '.join(SCENARIOS)}")
    p.add_argument(
        "--out", type=Path, default=RESULTS / "latest.json", help="results file (default bench/results/latest.json)"
    )
    p.add_argument(
        "--mock-port", type=int, default=0, help="fixed port for the mock upstream (so a peer can be pointed at it)"
    )
    p.add_argument(
        "--peers-file",
        type=Path,
        default=None,
        help="JSON list of other gateways in front of the same mock, measured beside Switchboard: "
        '[{"name", "url", "key", "model", "headers": {...}, "target": ratio}] (bench/peers/peers.sh writes it)',
    )
    p.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the gateway (experiments, e.g. SWITCHBOARD_REQUEST_LOG_LEVEL=WARNING); repeatable",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = p.parse_args(argv)
    bad = [e for e in args.gateway_env if "=" not in e]
    if bad:
        p.error(f"--gateway-env needs NAME=VALUE, got {', '.join(bad)}")
    args.extra_env = dict(e.split("=", 1) for e in args.gateway_env)
    args.peers = _load_peers(p, args.peers_file)
    args.selected = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in args.selected if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    return args


def _load_peers(p: argparse.ArgumentParser, path: Path | None) -> list[Peer]:
    if path is None:
        return []
    try:
        data = orjson.loads(path.read_bytes())
        return [
            Peer(
                d["name"],
                d["url"].rstrip("/"),
                d.get("key", ""),
                d.get("model", config.CHAT[0]),
                d.get("headers", {}),
                d.get("target"),
            )
            for d in data
        ]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        p.error(f"--peers-file {path}: {exc}; expected a JSON list of {{name, url, key, model, headers}}")


def _log(started: float, message: str) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    if "throughput" in args.selected and not procs.have_wrk():
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk); run with --only to skip throughput")
    work = Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    results: dict[str, Any] = {
        "meta": {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "server": args.server,
            "quick": args.quick,
            "commit": _git_commit(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "peers": [p.name for p in args.peers],
            "gateway_env": args.extra_env,
        },
        "scenarios": {},
        "notes": [],
    }
    started_procs: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work, args.mock_port or None)
        started_procs.append(mock)
        for script in config.mock_scripts():
            status, body = procs.http(
                "POST", f"{mock_url}/_control/script", orjson.dumps(script), {"Content-Type": "application/json"}
            )
            if status != 200:
                raise RuntimeError(f"scripting the mock failed: {status} {body[:200]!r}")
        _log(started, f"mock upstream on {mock_url}")
        env, key = procs.prepare_database(work, "small", config.config_yaml(mock_url), config.ORG, config.AGENT)
        env.update(args.extra_env)
        gateway, gateway_url = procs.start_gateway(args.server, "gateway", work, env)
        started_procs.append(gateway)
        time.sleep(0.5)
        rss_idle = gateway.rss_mb()
        _log(started, f"gateway ({args.server}) on {gateway_url}, idle RSS {rss_idle} MB")
        bench = Bench(
            work,
            args.server,
            args.quick,
            mock,
            mock_url,
            gateway,
            gateway_url,
            key,
            rss_idle,
            args.peers,
            args.extra_env,
            results["notes"],
        )
        for name, fn in SCENARIOS.items():
            if name not in args.selected:
                continue
            need = ESTIMATE_S[name][1 if args.quick else 0]
            if time.monotonic() - started + need > BUDGET_S:
                results["notes"].append(f"{name}: skipped, it would overrun the {BUDGET_S:.0f} s budget")
                continue
            _log(started, f"{name} ...")
            try:
                results["scenarios"][name] = fn(bench)
            except Exception as exc:  # noqa: BLE001 - one failed scenario must not lose the others
                results["notes"].append(f"{name}: failed: {exc}")
                _log(started, f"{name} FAILED: {exc}")
            if not gateway.alive():
                results["notes"].append(f"the gateway exited during {name}:\n{gateway.tail()}")
                break
    finally:
        for p in reversed(started_procs):
            p.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    return results


def headline(results: dict[str, Any]) -> str:
    m = results["meta"]
    mode = "quick" if m["quick"] else "full"
    return (
        f"Switchboard benchmark: server {m['server']}, {mode} run, {m['cpus']} CPUs, Python {m['python']}, "
        f"commit {m['commit']}, {m['started']}, {m['duration_s']} s (load avg {m['loadavg_start'][0]:.2f} at start)"
    )


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    results = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(headline(results))
    print("gateway - direct: difference of percentiles of the two raw distributions (ms); ratio: gateway / direct")
    print(report.render(report.rows(results)))
    for note in results["notes"]:
        print(f"note: {note}")
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
