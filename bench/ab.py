"""`make bench-ab BASE=<rev>`: two revisions measured interleaved, in one run (docs/performance.md#ab).

A figure measured in one run and compared with a figure from another says more about the
machine's load than about the code. This tool checks `BASE` out into a temporary folder
(`git archive`, its own virtualenv when its requirements differ), serves it and the working
tree (or `--head REV`) side by side against one mock upstream, and measures both in the
same run:

* 1-client latency: each round measures each side alone (the other side's server is
  stopped meanwhile, so its background work lands in nobody's tail) four times in ABBA
  order, the load generator alternating small batches of direct calls and calls through
  that side; each round gives each side its added p50 and p99 (side − its direct calls);
* throughput at `--connections` clients with wrk, base and head alternating (ABBA) per
  round, each alone too.

Every figure is reported as the median over `--rounds` rounds with its range, the
difference head − base, and a verdict from `bench.ab_verdict` (a win only when the ranges
do not overlap). Results go to bench/results/ab-latest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import ab_verdict, config, procs, summary
from bench.stats import percentile

ROOT = procs.ROOT
RESULTS = ROOT / "bench" / "results"
WORKING_TREE = "WORKTREE"


@dataclass
class Side:
    """One revision under test: its source folder and the interpreter that runs it."""

    label: str
    root: Path
    python: str
    commit: str
    proc: procs.Proc | None = None
    url: str = ""
    key: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def manage(self, args: list[str], env: dict[str, str]) -> str:
        full = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **env}
        done = subprocess.run(
            [self.python, "manage.py", *args], cwd=self.root, env=full, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.label}: manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def has_serve(self) -> bool:
        return any(self.root.glob("*/management/commands/serve.py"))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def resolve(rev: str) -> str:
    try:
        return git("rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(
            f"bench-ab: {rev!r} is not a commit of this repository; pass BASE=<commit or branch>"
        ) from None


def checkout(rev: str, label: str, work: Path) -> Side:
    """`rev`'s tree in work/<label> and an interpreter for it (this one when requirements match)."""
    commit = resolve(rev)
    root = work / label
    root.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    python = sys.executable
    theirs = (root / "requirements.txt").read_text() if (root / "requirements.txt").exists() else ""
    if not satisfied(theirs):
        venv = work / f"{label}-venv"
        print(f"bench-ab: {label} ({commit[:10]}) pins other requirements: building its virtualenv in {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", "-r", str(root / "requirements.txt")],
            check=True,
            timeout=1200,
        )
        python = str(venv / "bin" / "python")
    return Side(label=label, root=root, python=python, commit=commit)


def satisfied(requirements: str) -> bool:
    """True when every `name==version` pin of `requirements` is installed here at that version
    (then this interpreter runs that revision exactly as its own virtualenv would)."""
    from importlib import metadata

    for line in requirements.splitlines():
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        if "==" not in spec:
            return False
        name, version = (part.strip() for part in spec.split("==", 1))
        try:
            if metadata.version(name.split("[", 1)[0]) != version:
                return False
        except metadata.PackageNotFoundError:
            return False
    return True


def working_tree() -> Side:
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return Side(label="head", root=ROOT, python=sys.executable, commit=commit + ("+dirty" if dirty else ""))


def command(side: Side, how: str, port: int) -> list[str]:
    """The same command for both sides: each revision's `manage.py serve`, or one plain uvicorn line."""
    if how == "serve":
        return [side.python, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return [
        side.python, "-m", "uvicorn", "gateway_project.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--loop", "uvloop", "--http", "httptools", "--no-access-log",
    ]  # fmt: skip


def start(
    side: Side, how: str, mock_url: str, profile: str, work: Path, redis_url: str = "", database_url: str = ""
) -> None:
    env = {
        "DATABASE_URL": database_url or f"sqlite:///{work / (side.label + '.sqlite3')}",
        "REDIS_URL": redis_url,
        # each side its own keys in a shared Redis: two clusters of one process, never one of two
        "SWITCHBOARD_CLUSTER": f"ab-{side.label}-{os.urandom(3).hex()}",
        "SWITCHBOARD_USAGE_SPOOL_DIR": str(work / f"{side.label}-spool"),
        "SECRET_KEY": os.urandom(24).hex(),
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
    }
    side.env = env
    side.manage(["migrate", "-v0"], env)
    yaml_path = work / f"{side.label}.yaml"
    document = (PROFILES[profile].head if side.label == "head" else None) or PROFILES[profile].document
    yaml_path.write_text(document(mock_url))
    side.manage(["import_config", str(yaml_path)], env)
    agent = config.FEATURE_AGENT if profile in ("features", "alerts") else config.AGENT
    side.key = side.manage(["create_api_key", "--org", config.ORG, "--agent", agent], env).strip().splitlines()[-1]
    serve(side, how, work)


def serve(side: Side, how: str, work: Path) -> None:
    """Start (or restart: a fresh process, same database and key) `side`'s server."""
    if side.proc is not None:
        side.proc.stop()
    port = procs.free_port()
    log = work / "logs"
    log.mkdir(exist_ok=True)
    side.proc = procs.Proc(side.label, command(side, how, port), log, side.env, cwd=side.root)
    side.url = f"http://127.0.0.1:{port}"
    procs.wait_http(f"{side.url}/health", side.proc, timeout=90)


@dataclass(frozen=True)
class Profile:
    """One benchmark configuration: its document and whether its bodies vary (cache misses)."""

    document: Callable[[str], str]
    vary: bool = False
    head: Callable[[str], str] | None = None  # the head side's document, when it differs (BASE=HEAD: a setting's cost)


# plain: the fixed 10-model configuration; features: limits, budget, two deployments, the cache;
# realistic: the plain model inside a configuration of a real deployment's size (docs/performance.md#ab).
PROFILES = {
    "plain": Profile(config.config_yaml),
    "features": Profile(config.features_yaml, vary=True),
    "realistic": Profile(config.realistic_yaml),
    # alerts: the features profile, the head side with alerts configured too (docs/alerts.md#cost)
    "alerts": Profile(config.features_yaml, vary=True, head=config.alerts_yaml),
}


def model(profile: str) -> str:
    return config.FEATURES[0] if profile in ("features", "alerts") else config.CHAT[0]


def body(profile: str) -> str:
    return config.chat_body(model(profile), vary=PROFILES[profile].vary)


def calls_rounds(sides: list[Side], args: argparse.Namespace, work: Path) -> dict[str, dict[str, list[float]]]:
    """Per round and side: Python calls and CPU µs per request, in process (bench/callcount.py),
    each side on a copy of its own database so its server is not disturbed."""
    script = ROOT / "bench" / "callcount.py"
    out: dict[str, dict[str, list[float]]] = {s.label: {"calls": [], "cpu": []} for s in sides}
    for r in range(args.rounds):
        for s in sides if r % 2 == 0 else list(reversed(sides)):
            db = work / f"{s.label}-calls.sqlite3"
            shutil.copy(work / f"{s.label}.sqlite3", db)
            env = {
                **os.environ,
                **s.env,
                "DATABASE_URL": f"sqlite:///{db}",
                "SWITCHBOARD_USAGE_SPOOL_DIR": str(work / f"{s.label}-calls-spool"),
                "SWITCHBOARD_BENCH_KEY": s.key,
            }
            done = subprocess.run(
                [s.python, str(script), "--json", "--model", model(args.profile)],
                cwd=s.root, env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"call count of {s.label} failed:\n{done.stderr[-3000:]}")
            row = orjson.loads(done.stdout.strip().splitlines()[-1])
            out[s.label]["calls"].append(row["calls_per_request"])
            out[s.label]["cpu"].append(row["cpu_us"])
        print(
            f"calls round {r + 1}/{args.rounds}: "
            + ", ".join(f"{k} {v['calls'][-1]:.0f} calls, {v['cpu'][-1]:.0f} µs CPU" for k, v in out.items())
        )
    return out


# Each latency round measures every side this many times, alone, in ABBA order.
PARTS = 4


@contextlib.contextmanager
def alone(side: Side, sides: list[Side], signal_group: Callable[[int, int], None] = os.killpg) -> Iterator[None]:
    """`side` measured with every other side's server stopped (SIGSTOP, then SIGCONT).

    Two servers on one 2-core machine share its cores: the other one's background work
    (its usage writer flushing the rows of its last batch, its polls) would land in this
    side's tail, and this side's in the other's. Production runs one gateway per machine.
    """
    others = [s for s in sides if s is not side and s.proc is not None]
    for s in others:
        signal_group(s.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        yield
    finally:
        for s in others:
            signal_group(s.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]


def latency_rounds(sides: list[Side], mock_url: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Per round and side: added p50 and p99 (ms) against the direct calls made alongside it.

    A round measures each side PARTS times, alone (`alone`), in ABBA order; each
    load-generator run alternates batches of direct calls and calls through that side.
    """
    out: dict[str, dict[str, list[float]]] = {s.label: {"p50": [], "p99": []} for s in sides}
    direct = {"name": "direct", "url": f"{mock_url}/v1/chat/completions", "body": config.chat_body(config.CHAT[1])}
    batches = max(1, args.latency_batches // PARTS)
    for r in range(args.rounds):
        seen: dict[str, dict[str, list[float]]] = {s.label: {"side": [], "direct": []} for s in sides}
        order = sides if r % 2 == 0 else list(reversed(sides))
        for part in range(PARTS):
            for s in order if part % 2 == 0 else list(reversed(order)):
                target = {
                    "name": s.label,
                    "url": f"{s.url}/v1/chat/completions",
                    "body": body(args.profile),
                    "headers": {"Authorization": f"Bearer {s.key}"},
                    **({"vary": config.VARY} if PROFILES[args.profile].vary else {}),
                }
                spec = {
                    "mode": "latency",
                    "targets": [direct, target],
                    "rounds": batches,
                    "batch": args.batch,
                    "warmup": 50,
                    "max_s": 300,
                }
                with alone(s, sides):
                    raw = procs.loadgen(spec, timeout=400)
                for name, statuses in raw["statuses"].items():
                    bad = {k: v for k, v in statuses.items() if str(k) != "200"}
                    if bad:
                        raise RuntimeError(
                            f"latency round {r + 1}: {name} answered {bad}: the comparison would be void"
                        )
                seen[s.label]["side"] += raw["samples"][s.label]
                seen[s.label]["direct"] += raw["samples"]["direct"]
        for s in sides:
            mine, theirs = seen[s.label]["side"], seen[s.label]["direct"]
            out[s.label]["p50"].append(round(percentile(mine, 50) - percentile(theirs, 50), 4))
            out[s.label]["p99"].append(round(percentile(mine, 99) - percentile(theirs, 99), 4))
        print(
            f"latency round {r + 1}/{args.rounds}: "
            + ", ".join(f"{s.label} +{out[s.label]['p50'][-1]:.3f}/+{out[s.label]['p99'][-1]:.3f} ms" for s in sides)
        )
    return out


def throughput_rounds(sides: list[Side], args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {s.label: [] for s in sides}
    for r in range(args.rounds):
        for s in sides if r % 2 == 0 else list(reversed(sides)):
            with alone(s, sides):
                result = procs.wrk(
                    f"{s.url}/v1/chat/completions",
                    body(args.profile),
                    {"Authorization": f"Bearer {s.key}"},
                    args.connections,
                    args.seconds,
                    work,
                    vary=config.VARY if PROFILES[args.profile].vary else None,
                )
            if result["errors"] or result["non_2xx"]:
                raise RuntimeError(f"throughput round {r + 1}: {s.label} had errors {result}: the comparison is void")
            out[s.label].append(result["rps"])
        print(f"throughput round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.0f} req/s" for k, v in out.items()))
    return out


MEMORY_REQUESTS = 10_000


def memory_rounds(sides: list[Side], args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    """Resident memory of a fresh server after 10 000 requests at `--connections` clients (the
    memory row of `make bench`), each side restarted before each reading, ABBA, each alone."""
    out: dict[str, list[float]] = {s.label: [] for s in sides}
    for r in range(args.rounds):
        for s in sides if r % 2 == 0 else list(reversed(sides)):
            serve(s, args.command, work)
            with alone(s, sides):
                target = {
                    "name": s.label,
                    "url": f"{s.url}/v1/chat/completions",
                    "headers": {"Authorization": f"Bearer {s.key}"},
                    "body": body(args.profile),
                }
                spec = {"mode": "count", "target": target, "total": MEMORY_REQUESTS, "concurrency": args.connections}
                raw = procs.loadgen({**spec, "max_s": 90}, timeout=150)
                time.sleep(0.5)
                if raw["done"] < MEMORY_REQUESTS or set(map(str, raw["statuses"])) - {"200"}:
                    raise RuntimeError(
                        f"memory round {r + 1}: {s.label} answered {raw['statuses']}: the comparison is void"
                    )
                out[s.label].append(s.proc.rss_mb())  # type: ignore[union-attr]
        print(f"memory round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f} MB" for k, v in out.items()))
    return out


@contextlib.contextmanager
def running(sides: list[Side], args: argparse.Namespace, work: Path) -> Iterator[str]:
    mock, mock_url = procs.start_mock(work)
    databases: list[procs.ThrowawayPostgres] = []
    try:
        for s in sides:
            if args.postgres:  # each side a database of its own on that server
                databases.append(procs.ThrowawayPostgres(args.postgres))
            start(s, args.command, mock_url, args.profile, work, args.redis, databases[-1].url if databases else "")
        yield mock_url
    finally:
        for s in sides:
            if s.proc is not None:
                s.proc.stop()
        mock.stop()
        for db in databases:
            db.drop()


def figures(
    lat: dict[str, dict[str, list[float]]],
    rps: dict[str, list[float]],
    calls: dict[str, dict[str, list[float]]] | None = None,
    memory: dict[str, list[float]] | None = None,
) -> list[ab_verdict.Figure]:
    low, high = ab_verdict.LOWER_IS_BETTER, ab_verdict.HIGHER_IS_BETTER
    out = []
    if calls:
        out.append(ab_verdict.compare("Python calls per request", calls["base"]["calls"], calls["head"]["calls"], low))
        out.append(
            ab_verdict.compare("CPU µs per request, in process", calls["base"]["cpu"], calls["head"]["cpu"], low)
        )
    out += [
        ab_verdict.compare("added p50 (ms), 1 client", lat["base"]["p50"], lat["head"]["p50"], low),
        ab_verdict.compare("added p99 (ms), 1 client", lat["base"]["p99"], lat["head"]["p99"], low),
    ]
    if rps:
        out.append(ab_verdict.compare("req/s, wrk", rps["base"], rps["head"], high))
    if memory:
        out.append(ab_verdict.compare("RSS after 10 000 requests (MB)", memory["base"], memory["head"], low))
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the revision to compare against (commit, tag or branch)")
    p.add_argument("--head", default=WORKING_TREE, help="the other revision (default: the working tree as it is)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (≥ 3 for a verdict; default 3)")
    p.add_argument("--latency-batches", type=int, default=20, help="alternating batches per latency round")
    p.add_argument("--batch", type=int, default=100, help="requests per batch (default 100)")
    p.add_argument("--seconds", type=float, default=5.0, help="wrk seconds per side and throughput round")
    p.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    p.add_argument("--profile", choices=tuple(PROFILES), default="plain")
    p.add_argument(
        "--redis",
        default="",
        metavar="URL",
        help="serve both sides with this REDIS_URL (shared limits, cache and breakers; default: no Redis)",
    )
    p.add_argument(
        "--postgres",
        default="",
        metavar="URL",
        help="serve each side on a throwaway database of its own on this PostgreSQL server (default: SQLite)",
    )
    p.add_argument(
        "--command",
        choices=("auto", "serve", "uvicorn"),
        default="auto",
        help="serve both with their own `manage.py serve` (auto: when both have it) or one plain uvicorn line",
    )
    p.add_argument("--no-throughput", action="store_true", help="latency only (wrk not needed)")
    p.add_argument("--no-calls", action="store_true", help="skip the in-process call count (bench/callcount.py)")
    p.add_argument(
        "--save-as",
        default="",
        metavar="NAME",
        help="also save the result as NAME.json in make bench's run directory (read by bench.summary)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="also each side's resident memory after 10 000 requests, a fresh process per reading",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.rounds < ab_verdict.MIN_ROUNDS:
        print(f"bench-ab: {args.rounds} rounds give no verdict (need ≥ {ab_verdict.MIN_ROUNDS}); figures only")
    if not args.no_throughput and not procs.have_wrk():
        raise SystemExit("bench-ab: wrk is not installed (`apt-get install wrk`, or pass --no-throughput)")
    work = Path(tempfile.mkdtemp(prefix="switchboard-ab-"))
    try:
        base = checkout(args.base, "base", work)
        head = working_tree() if args.head == WORKING_TREE else checkout(args.head, "head", work)
        if args.command == "auto":
            args.command = "serve" if base.has_serve() and head.has_serve() else "uvicorn"
        sides = [base, head]
        print(f"bench-ab: base {base.commit[:12]}, head {head.commit[:12]}, profile {args.profile}, {args.command}")
        with running(sides, args, work) as mock_url:
            calls = None if args.no_calls else calls_rounds(sides, args, work)
            lat = latency_rounds(sides, mock_url, args)
            rps = {} if args.no_throughput else throughput_rounds(sides, args, work)
            # both sides served the same requests: their resident memory now, one reading each (no verdict)
            rss = {s.label: s.proc.rss_mb() for s in sides if s.proc is not None}
            memory = memory_rounds(sides, args, work) if args.memory else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = figures(lat, rps, calls, memory)
    print()
    print(ab_verdict.table(result, base.commit[:10], head.commit[:10]))
    print(f"\nresident memory after the run (MB, one reading): base {rss.get('base')}, head {rss.get('head')}")
    load = os.getloadavg()
    print(f"machine load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    report: dict[str, Any] = {
        "base": base.commit,
        "head": head.commit,
        "profile": args.profile,
        "command": args.command,
        "database": "postgresql" if args.postgres else "sqlite",
        "rounds": args.rounds,
        "connections": args.connections,
        "loadavg": load,
        "figures": [f.as_dict() for f in result],
        "rss_mb": rss,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ab-latest.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if args.save_as:
        summary.save(args.save_as, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
