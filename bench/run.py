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

from bench import config, procs, report, summary
from bench.scenarios import SCENARIOS, Bench, Peer, Side
from gateway_project import servers as serve_commands

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET_S = 400.0
# rough seconds each scenario needs (full, quick), so the run skips what would overrun the budget
ESTIMATE_S = {
    "memory": (30, 25),
    "latency": (50, 15),
    "stream": (20, 8),
    "throughput": (80, 50),
    "config": (60, 40),
    "storm": (70, 70),
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
    p.add_argument(
        "--postgres",
        default=_first_env("BENCH_POSTGRES_URL", "SWITCHBOARD_TEST_POSTGRES_URL", "DATABASE_URL", prefix="postgres"),
        help="PostgreSQL server for the feature-enabled gateways (a throwaway database is created on it and "
        "dropped; default: BENCH_POSTGRES_URL, SWITCHBOARD_TEST_POSTGRES_URL or a postgres DATABASE_URL)",
    )
    p.add_argument(
        "--redis",
        default=_first_env("BENCH_REDIS_URL", "REDIS_URL", "SWITCHBOARD_TEST_REDIS_URL", prefix="redis"),
        help="REDIS_URL of the feature-enabled gateways (default: BENCH_REDIS_URL, REDIS_URL or SWITCHBOARD_TEST_REDIS_URL)",
    )
    p.add_argument(
        "--no-sides",
        action="store_true",
        help="measure the plain uvicorn gateway only (no daphne, no feature-enabled gateways)",
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


def _first_env(*names: str, prefix: str) -> str:
    for name in names:
        value = os.environ.get(name, "")
        if value.startswith(prefix):
            return value
    return ""


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


def _features_backends(args: argparse.Namespace, notes: list[str]) -> tuple[str | None, str, dict[str, str]]:
    """(PostgreSQL server URL or None, REDIS_URL or "", what the row ran on) for the features' gateways."""
    pg, redis_url = args.postgres or None, args.redis or ""
    ran_on = {"database": "PostgreSQL", "redis": "Redis"}
    if pg is None:
        ran_on["database"] = "SQLite (no PostgreSQL URL: set DATABASE_URL, BENCH_POSTGRES_URL or --postgres)"
    if redis_url:
        why = procs.redis_reachable(redis_url)
        if why:
            ran_on["redis"] = f"no Redis ({redis_url} unreachable: {why})"
            redis_url = ""
    else:
        ran_on["redis"] = "no Redis (no REDIS_URL: set REDIS_URL, BENCH_REDIS_URL or --redis)"
    for what in ran_on.values():
        if what not in ("PostgreSQL", "Redis"):
            notes.append(f"features: ran on {what}")
    return pg, redis_url, ran_on


def _start_sides(
    args: argparse.Namespace,
    work: Path,
    mock_url: str,
    plain_env: dict[str, str],
    plain_key: str,
    started_procs: list[procs.Proc],
    dropped: list[procs.ThrowawayPostgres],
    results: dict[str, Any],
) -> list[Side]:
    """daphne on a copy of the plain database, and the feature-enabled configuration on uvicorn
    and on daphne (one throwaway PostgreSQL database, Redis), each its own process."""
    other = "daphne" if args.server != "daphne" else "uvicorn"
    copy = work / f"{other}.sqlite3"
    shutil.copyfile(work / "small.sqlite3", copy)
    env = {**plain_env, "DATABASE_URL": f"sqlite:///{copy}", "SWITCHBOARD_USAGE_SPOOL_DIR": str(work / "other-spool")}
    proc, url = procs.start_gateway(other, other, work, env)
    started_procs.append(proc)
    sides = [Side(other, other, proc, url, plain_key, False)]
    pg, redis_url, ran_on = _features_backends(args, results["notes"])
    results["meta"]["features_ran_on"] = ran_on
    database_url = None
    if pg:
        try:
            db = procs.ThrowawayPostgres(pg)
        except Exception as exc:  # noqa: BLE001 - an unreachable server: the row runs on SQLite and says why
            ran_on["database"] = f"SQLite (PostgreSQL unreachable: {type(exc).__name__}: {exc})"
            results["notes"].append(f"features: ran on {ran_on['database']}")
        else:
            dropped.append(db)
            database_url = db.url
    fenv, fkey = procs.prepare_database(
        work, "features", config.features_yaml(mock_url), config.ORG, config.FEATURE_AGENT, database_url
    )
    tracing_off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""}
    for server, name in ((args.server, "features"), (other, f"{other} features")):
        env = {
            **fenv,
            **tracing_off,
            **args.extra_env,
            "REDIS_URL": redis_url,
            "SWITCHBOARD_USAGE_SPOOL_DIR": str(work / f"{server}-features-spool"),
            "SWITCHBOARD_CLUSTER": f"bench-{server}",  # two gateways, one database: no shared breakers
        }
        proc, url = procs.start_gateway(server, name.replace(" ", "-"), work, env)
        started_procs.append(proc)
        sides.append(Side(name, server, proc, url, fkey, True))
        if server == args.server:  # the governed path on the same gateway: limits, budget, no cache
            sides.append(Side(f"{name} no cache", server, proc, url, fkey, True, config.GOVERNED[0]))
    return sides


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
    dropped: list[procs.ThrowawayPostgres] = []
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
        sides: list[Side] = []
        if not args.no_sides:
            sides = _start_sides(args, work, mock_url, env, key, started_procs, dropped, results)
            for side in sides:
                _log(started, f"{side.name} ({side.server}) on {side.url}")
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
            sides,
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
        for db in dropped:
            try:
                db.drop()
            except Exception as exc:  # noqa: BLE001 - say so, never lose the results
                print(f"could not drop the throwaway database {db.name}: {exc}", file=sys.stderr)
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
    summary.save("run", results)
    print(headline(results))
    print("gateway - direct: difference of percentiles of the two raw distributions (ms); ratio: gateway / direct")
    print(report.render(report.rows(results)))
    for note in results["notes"]:
        print(f"note: {note}")
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
