"""`python -m bench.alerts_scale`: alerts exactly once across replicas, at scale (docs/alerts.md#at-scale).

A real cluster on loopback: a throwaway PostgreSQL, a redis-server of its own, the mock upstream,
`--replicas` `manage.py serve` processes (`--workers` each) sharing them, and a webhook receiver in
this process that records every alert with its arrival time and checks its signature. The replicas
start once; every run then uses an org and a failing model of its own (all in the configuration
imported before the start), so nothing of one run carries into the next:

1. budget: `--requests` requests at once (`--concurrency` in flight, round robin over the replicas)
   against an org whose budget they pass well beyond 100 %; the receiver must get exactly one
   alert at 80 % and one at 100 % for that org;
2. breaker: two orgs' requests to a model the mock fails with 500 open its link's breaker; the
   receiver must get exactly one `breaker_open` for it, at most 2 s after the request that
   opened it was sent (an upper bound of transition → arrival).

Every run is counted again at the end, after a settle pause, so a late duplicate is still seen.
Prints a table; exits 1 on any duplicate, miss, bad signature or latency over 2 s. Every wait is
bounded; every process started here is stopped on exit, Ctrl-C and SIGTERM included.

    python -m bench.alerts_scale --runs 10 --requests 1000 --replicas 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench import procs

SECRET = "alerts-scale-" + secrets.token_hex(8)
THRESHOLDS = (80, 100)
LATENCY_BOUND_S = 2.0
# Each answer bills 40 prompt tokens ($0.002) against a reservation of the gateway's prompt floor
# (routing.gateway.limiting.RESERVE_PROMPT_FLOOR, 16 tokens: $0.0008). A budget of 125.5 answers leaves,
# after 125 of them, $0.001: still room for one reservation, whose answer then takes spend past 100 %; so
# spend always ends past 100 % (a budget of whole answers could stop a hair short of it, with nothing left
# to reserve), however the requests interleave.
PROMPT_TOKENS = 40
PRICE_PER_MTOK = 50.0
ANSWERS_TO_100 = 125.5
# The mock answers each run's failing model 503, which charges the link whoever sent it, and one failure opens
# it (threshold 1): the transition happens while the first failing request is served, so the time that
# request is sent bounds the transition from below.
BROKEN_STATUS = 503
BREAKER_ORG = "breakers"  # no budget: its requests reach the failing upstream whatever the runs spent


def config_yaml(mock: str, hook: str, runs: int) -> str:
    """Every run's org (with its budget) and failing model, the breaker orgs, and one webhook rule."""
    budget = ANSWERS_TO_100 * PROMPT_TOKENS * PRICE_PER_MTOK / 1e6
    models = "".join(
        f"  - id: brk-{i}\n    provider: mock\n    upstream_model: scale-broken-{i}\n    capabilities: [chat]\n"
        for i in range(runs)
    )
    orgs = "".join(
        f"  - name: run{i}\n    budget: {{usd: {budget:.6f}, period: total}}\n    agents:\n      - name: bot\n"
        for i in range(runs)
    )
    orgs += f"  - name: {BREAKER_ORG}\n    agents:\n      - name: bot\n"
    return f"""
resilience:
  max_retries: 0
  breaker_failure_threshold: 1
  breaker_cooldown_s: 600
providers:
  - name: mock
    base_url: {mock}/v1
models:
  - id: bud-chat
    provider: mock
    upstream_model: scale-billed
    capabilities: [chat]
    input_price_per_mtok: {PRICE_PER_MTOK}
    output_price_per_mtok: 0
{models}orgs:
{orgs}alerts:
  - name: ops
    webhook: {{url: "{hook}/alerts", secret_env: SWITCHBOARD_ALERT_SCALE_SECRET}}
    events: [breaker_open]
    budget_percent: [{", ".join(str(t) for t in THRESHOLDS)}]
"""


BILLED_ANSWER = json.dumps(
    {
        "id": "chatcmpl-scale",
        "object": "chat.completion",
        "created": 1,
        "model": "scale-billed",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 1, "total_tokens": PROMPT_TOKENS + 1},
    }
)


class Receiver:
    """The webhook receiver: each POST's arrival (monotonic), its JSON, and whether its signature holds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[tuple[float, dict[str, Any], bool]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                at = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(expected, self.headers.get("X-Switchboard-Signature", ""))
                with receiver.lock:
                    receiver.received.append((at, json.loads(body), signed))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def matching(self, event: str, **subject: str) -> list[tuple[float, dict[str, Any], bool]]:
        with self.lock:
            rows = list(self.received)
        return [
            r for r in rows if r[1]["event"] == event and all(r[1]["subject"].get(k) == v for k, v in subject.items())
        ]

    def wait(self, event: str, count: int, within_s: float, **subject: str) -> list[tuple[float, dict[str, Any], bool]]:
        deadline = time.monotonic() + within_s
        while len(self.matching(event, **subject)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.matching(event, **subject)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Cluster:
    """PostgreSQL, Redis, the mock and the replicas, started once for every run; `stop()` ends each."""

    def __init__(self, work: Path, postgres: str) -> None:
        self.work = work
        self.postgres_server: Any = None  # the throwaway server started here, if any
        self.database: procs.ThrowawayPostgres | None = None
        self.stack = ExitStack()
        self.replicas: list[tuple[procs.Proc, str]] = []
        self.keys: dict[str, str] = {}
        self.server_url = postgres

    def start(self, hook: str, runs: int, replicas: int, workers: int) -> None:
        if not self.server_url:
            from tests.services import ThrowawayPostgres, postgres_bin

            bindir = postgres_bin()
            if bindir is None:
                raise SystemExit("needs PostgreSQL: no initdb/postgres binaries (apt-get install postgresql)")
            self.postgres_server = ThrowawayPostgres(bindir)
            self.stack.callback(self.postgres_server.stop)
            self.server_url = self.postgres_server.url
        self.database = procs.ThrowawayPostgres(self.server_url)
        self.stack.callback(self.database.drop)
        redis_port = procs.free_port()
        redis = procs.Proc(
            "redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", ""], self.work
        )
        self.stack.callback(redis.stop)
        mock, mock_url = procs.start_mock(self.work)
        self.stack.callback(mock.stop)
        for i in range(runs):
            script = {"model": f"scale-broken-{i}", "steps": [], "then": {"status": BROKEN_STATUS}}
            httpx.post(f"{mock_url}/_control/script", json=script, timeout=10).raise_for_status()
        httpx.post(
            f"{mock_url}/_control/script", json={"model": "scale-billed", "steps": [], "then": {"body": BILLED_ANSWER}}
        ).raise_for_status()
        env = self.prepare(config_yaml(mock_url, hook, runs), runs)
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        for n in range(replicas):
            self.replicas.append(self.serve(n, workers, env))

    def prepare(self, document: str, runs: int) -> dict[str, str]:
        """Migrate, import the document, create every run org's key in one process; the replicas' env."""
        assert self.database is not None
        env = {
            "DATABASE_URL": self.database.url,
            "SECRET_KEY": secrets.token_urlsafe(40),
            "SWITCHBOARD_ALERT_SCALE_SECRET": SECRET,
        }
        procs.manage(["migrate", "-v0"], env)
        path = self.work / "alerts-scale.yaml"
        path.write_text(document)
        procs.manage(["import_config", str(path)], env)
        names = [*(f"run{i}" for i in range(runs)), BREAKER_ORG]
        script = (
            "import json; from policies.keys import create_api_key; from policies.models import Agent; "
            f"agents = Agent.objects.select_related('org').filter(org__name__in={names!r}, name='bot'); "
            "print(json.dumps({a.org.name: create_api_key(agent=a, label='alerts bench')[1] for a in agents}))"
        )
        self.keys = json.loads(procs.manage(["shell", "-c", script], env).strip().splitlines()[-1])
        return env

    def serve(self, n: int, workers: int, env: dict[str, str]) -> tuple[procs.Proc, str]:
        port = procs.free_port()
        argv = [procs.PY, "manage.py", "serve", "--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
        replica_env = {
            **env,
            "SWITCHBOARD_REPLICA": f"replica{n + 1}",
            "SWITCHBOARD_USAGE_SPOOL_DIR": str(self.work / f"spool-{n}"),
        }
        proc = procs.Proc(f"replica{n + 1}", argv, self.work, replica_env)
        self.stack.callback(proc.stop)
        url = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{url}/health", proc, timeout=120)
        return proc, url

    @property
    def urls(self) -> list[str]:
        return [url for _, url in self.replicas]

    def stop(self) -> None:
        self.stack.close()  # the replicas first, then the mock, Redis and the databases


async def burst(urls: list[str], key: str, requests: int, concurrency: int, answered: list[float]) -> Counter:
    """`requests` chat requests, `concurrency` in flight, round robin over `urls`: their statuses; the
    time (monotonic) each answer came back is appended to `answered`."""
    gate = asyncio.Semaphore(concurrency)
    body = {"model": "bud-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    headers = {"Authorization": f"Bearer {key}"}
    statuses: Counter = Counter()

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with gate:
            try:
                async with session.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body, headers=headers) as r:
                    await r.read()
                    statuses[r.status] += 1
                    if r.status == 200:
                        answered.append(time.monotonic())
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses[type(exc).__name__] += 1

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.wait_for(asyncio.gather(*(one(session, i) for i in range(requests))), timeout=300)
    return statuses


def budget_run(cluster: Cluster, receiver: Receiver, run: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run `run`'s org through its thresholds; the alerts its org got within the wait."""
    org = f"run{run}"
    answered: list[float] = []
    started = time.monotonic()
    statuses = asyncio.run(burst(cluster.urls, cluster.keys[org], args.requests, args.concurrency, answered))
    burst_s = time.monotonic() - started
    got = receiver.wait("budget", len(THRESHOLDS), args.wait, kind="org", name=org)
    arrived = {r[1]["detail"]["threshold_percent"]: round(r[0] - started, 2) for r in got}
    # The spend billed by the answers back when each alert arrived, in % of the budget: a lower bound of
    # what the org had spent by then (an answer is settled before the client has read it).
    billed = {
        r[1]["detail"]["threshold_percent"]: round(100 * sum(t <= r[0] for t in answered) / ANSWERS_TO_100) for r in got
    }
    return {
        "org": org,
        "statuses": dict(statuses),
        "burst_s": round(burst_s, 2),
        "arrived_s": arrived,
        "billed_percent": billed,
    }


def breaker_run(cluster: Cluster, receiver: Receiver, run: int, args: argparse.Namespace) -> dict[str, Any]:
    """One request to `run`'s failing model opens its link's breaker; the first alert's delay after it was sent."""
    model = f"brk-{run}"
    url = cluster.urls[run % len(cluster.urls)]
    sent = time.monotonic()
    status = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {cluster.keys[BREAKER_ORG]}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        timeout=30,
    ).status_code
    got = receiver.wait("breaker_open", 1, args.wait, model=model)
    latency = round(got[0][0] - sent, 3) if got else None
    return {"model": model, "status": status, "latency_s": latency}


def tally(receiver: Receiver, run: int) -> dict[str, Any]:
    """What the receiver holds for run `run` now: alerts per threshold and for its breaker, bad signatures."""
    budget = receiver.matching("budget", kind="org", name=f"run{run}")
    breaker = receiver.matching("breaker_open", model=f"brk-{run}")
    per = Counter(r[1]["detail"]["threshold_percent"] for r in budget)
    return {
        "per_threshold": {t: per.get(t, 0) for t in THRESHOLDS},
        "other_thresholds": sorted(set(per) - set(THRESHOLDS)),
        "breaker_open": len(breaker),
        "unsigned": sum(not r[2] for r in budget + breaker),
    }


def problems(row: dict[str, Any]) -> list[str]:
    """What is wrong with one run's final tally: duplicates, misses, a late or missing breaker alert."""
    out = []
    for threshold, count in row["per_threshold"].items():
        if count != 1:
            out.append(f"{count} alerts at {threshold} %")
    if row["other_thresholds"]:
        out.append(f"alerts at thresholds {row['other_thresholds']}")
    if row["breaker_open"] != 1:
        out.append(f"{row['breaker_open']} breaker_open alerts")
    if row["latency_s"] is None or row["latency_s"] > LATENCY_BOUND_S:
        out.append(f"breaker_open after {row['latency_s']} s")
    if row["unsigned"]:
        out.append(f"{row['unsigned']} with a bad signature")
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'run':>3}  {'200':>5} {'402':>5} {'other':>5}  {'burst s':>7}  {'80 %':>4} {'100 %':>5}  "
    head += f"{'80 % at s':>9} {'100 % at s':>10}  {'billed ≥ %':>13}  {'breaker':>7} {'latency s':>9}  verdict"
    lines = [head]
    for r in rows:
        st = r["statuses"]
        other = sum(v for k, v in st.items() if k not in (200, 402))
        at = r["arrived_s"]
        billed = "/".join(str(r["billed_percent"].get(t, "-")) for t in THRESHOLDS)
        lines.append(
            f"{r['run']:>3}  {st.get(200, 0):>5} {st.get(402, 0):>5} {other:>5}  {r['burst_s']:>7.2f}  "
            f"{r['per_threshold'][80]:>4} {r['per_threshold'][100]:>5}  {at.get(80, '-')!s:>9} {at.get(100, '-')!s:>10}  {billed:>13}  "
            f"{r['breaker_open']:>7} {r['latency_s']!s:>9}  {'; '.join(problems(r)) or 'ok'}"
        )
    return "\n".join(lines)


def measure(cluster: Cluster, receiver: Receiver, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for run in range(args.runs):
        row = {"run": run, **budget_run(cluster, receiver, run, args), **breaker_run(cluster, receiver, run, args)}
        rows.append(row)
        print(
            f"run {run + 1}/{args.runs}: {row['statuses']} in {row['burst_s']} s, thresholds at {row['arrived_s']}, "
            f"breaker_open after {row['latency_s']} s",
            flush=True,
        )
    time.sleep(args.settle)  # a late duplicate of any run still arrives in time to be counted
    for row in rows:
        row.update(tally(receiver, row["run"]))
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.alerts_scale", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10, help="runs, each with an org and a failing model of its own")
    p.add_argument("--requests", type=int, default=1000, help="requests of each run's burst")
    p.add_argument("--concurrency", type=int, default=100, help="requests in flight at once")
    p.add_argument("--replicas", type=int, default=3, help="`manage.py serve` replicas")
    p.add_argument("--workers", type=int, default=2, help="worker processes per replica")
    p.add_argument("--wait", type=float, default=10.0, help="seconds to wait for a run's alerts")
    p.add_argument("--settle", type=float, default=3.0, help="seconds to wait for late duplicates at the end")
    p.add_argument(
        "--postgres", default="", metavar="URL", help="a PostgreSQL server to use (default: a throwaway one)"
    )
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 100 or not 1 <= args.replicas <= 16 or not 1 <= args.workers <= 16:
        p.error("--runs must be 1..100, --replicas 1..16, --workers 1..16")
    if args.requests < 1 or not 1 <= args.concurrency <= 1000:
        p.error("--requests must be ≥ 1 and --concurrency 1..1000")
    return args


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run as Ctrl-C does: every process stopped on the way out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if shutil.which("redis-server") is None:
        raise SystemExit("needs redis-server (apt-get install redis-server)")
    signal.signal(signal.SIGTERM, _terminated)
    work = Path(tempfile.mkdtemp(prefix="switchboard-alerts-scale-"))
    receiver = Receiver()
    cluster = Cluster(work, args.postgres)
    try:
        started = time.monotonic()
        cluster.start(receiver.url, args.runs, args.replicas, args.workers)
        print(f"{args.replicas} replicas × {args.workers} workers up in {time.monotonic() - started:.1f} s", flush=True)
        rows = measure(cluster, receiver, args)
    finally:
        cluster.stop()
        receiver.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows))
    failed = sum(bool(problems(r)) for r in rows)
    latencies = sorted(r["latency_s"] for r in rows if r["latency_s"] is not None)
    if latencies:
        print(f"\nbreaker_open latency: median {latencies[len(latencies) // 2]} s, max {latencies[-1]} s")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{len(rows) - failed} of {len(rows)} runs exactly once and in time" + (f"; {failed} FAILED" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every process this run started is stopped", file=sys.stderr)
        sys.exit(130)
