"""`python -m bench.usage_writer_bench`: what the usage writer costs the serving process per batch (docs/usage-records.md#batch).

Against a real PostgreSQL (DATABASE_URL, else SWITCHBOARD_TEST_POSTGRES_URL, else the
local switchboard server): a throwaway database `<name>_usage_bench`, migrated, dropped
at the end. Per batch size, the same realistic records (20 keys, 4 models, 5 % errors,
fallbacks, trails) are queued with `UsageSink.record` (journal on, as in production)
and drained by `UsageSink.drain` on a writer thread of its own, interleaving:

- python: the batch converted, deduplicated and aggregated in Python (`db_insert_python`,
  the path before the one-statement batch, and still SQLite's and the fallback);
- statement: one statement from the journal lines (routing.runtime.usage.pgbatch), or
  with `--database sqlite` (a throwaway file) the statements inside SQLite
  (routing.runtime.usage.sqlitebatch).

CPU s is `time.thread_time()` of the writer thread around one drain: CPU time that
thread spent, an upper bound on how long it held the GIL (time in libpq waiting on the
socket is not counted: psycopg releases the GIL there). Loop lag is what a request
feels: an asyncio loop on the main thread ticks every 1 ms meanwhile and records how
late each tick fires; `idle` is the same loop with no drain, measured in the same run.
The request log line formatting (`log_requests`, logger at INFO) is part of the drain
and also shown alone. GC is the time the garbage collector ran during the drain (any
thread: it stops them all) and how many collections. Ratios are python / statement,
same run, medians.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import io
import logging
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any


def records(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Rows like accounting.finish queues them."""
    keys = [(f"sb-{k:07d}", f"org-{k % 5}", f"agent-{k % 3}") for k in range(20)]
    models = [("chat-a", "openai"), ("chat-b", "anthropic"), ("embed", "openai"), ("local", "mock")]
    out = []
    for _ in range(n):
        prefix, org, agent = rng.choice(keys)
        model, provider = rng.choice(models)
        status = 502 if rng.random() < 0.05 else 429 if rng.random() < 0.03 else 200
        fallback = rng.random() < 0.05
        prompt, completion = rng.randrange(10, 2000), rng.randrange(1, 800)
        out.append(
            {
                "record_id": uuid.uuid4().hex,
                "request_id": uuid.uuid4().hex,
                "org": org,
                "agent": agent,
                "key_prefix": prefix,
                "endpoint": "chat",
                "requested_model": "fast",
                "resolved_model": model,
                "model_used": model,
                "provider": provider,
                "fallback_reason": "upstream_5xx" if fallback else "",
                "attempts": 2 if fallback else 1,
                "status": status,
                "error_code": "upstream_unavailable" if status == 502 else "",
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "cost": round((prompt * 2.5 + completion * 10) / 1e6, 8),
                "latency_ms": 20 + rng.random() * rng.random() * 3000,
                "ttft_ms": None,
                "streamed": rng.random() < 0.3,
                "tokens_estimated": False,
                "cached": False,
                "trail": [("chat-x", "upstream_5xx"), (model, "ok")] if fallback else [(model, "ok")],
            }
        )
    return out


class Ticker:
    """An asyncio loop on this thread ticking every 1 ms; records each tick's lateness (ms)."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.recording = False

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        period = 0.001
        due = loop.time() + period
        while not stop.is_set():
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            if self.recording:
                self.late.append(max(0.0, (now - due) * 1000))
            due = max(due + period, now)


def p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def measure(args: argparse.Namespace, alias: str) -> list[tuple[str, int, dict[str, float]]]:
    from routing.runtime.observe.request_log import log_requests
    from routing.runtime.usage import UsageSink, writer

    rng = random.Random(11)
    spool = tempfile.mkdtemp(prefix="sb-usage-bench-")
    python_sink = UsageSink(
        spool_dir=spool, using=alias, insert=lambda rows: writer.db_insert_python(rows, using=alias)
    )
    statement_sink = UsageSink(spool_dir=spool, using=alias)
    sinks = {"python": python_sink, "statement": statement_sink}
    ticker = Ticker()
    stop = asyncio.Event()
    tick_task = asyncio.ensure_future(ticker.run(stop))
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    loop = asyncio.get_running_loop()

    gc_time = [0.0, 0]  # seconds spent in garbage collection, collections (any thread)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_started[0]
            gc_time[1] += 1

    def drained(sink: UsageSink) -> tuple[float, float, float, int]:
        gc_time[:] = [0.0, 0]
        t0, w0 = time.thread_time(), time.perf_counter()
        assert sink.drain()
        return time.thread_time() - t0, time.perf_counter() - w0, gc_time[0], gc_time[1]

    def logged(rows: list[dict[str, Any]]) -> float:
        t0 = time.thread_time()
        log_requests(rows)
        return time.thread_time() - t0

    worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="usage-writer")
    gc.callbacks.append(on_gc)
    try:
        # idle loop lag, same run
        ticker.late, ticker.recording = [], True
        await asyncio.sleep(0.5)
        ticker.recording = False
        idle = list(ticker.late)
        for size in args.sizes:
            for name in sinks:
                results[(name, size)] = {k: [] for k in ("cpu", "wall", "lag_max", "lag_p99", "log", "gc_ms", "gcs")}
            for rep in range(args.repeat + 1):  # the first round warms connections and caches
                for name, sink in sinks.items():
                    rows = records(size, rng)
                    for r in rows:
                        sink.record(r)
                    ticker.late, ticker.recording = [], True
                    cpu, wall, gc_s, gcs = await loop.run_in_executor(worker, drained, sink)
                    ticker.recording = False
                    if rep:
                        res = results[(name, size)]
                        res["cpu"].append(cpu * 1000)
                        res["wall"].append(wall * 1000)
                        res["lag_max"].append(max(ticker.late, default=0.0))
                        res["gc_ms"].append(gc_s * 1000)
                        res["gcs"].append(gcs)
                        res["lag_p99"].append(p99(ticker.late))
                        res["log"].append(await loop.run_in_executor(worker, logged, records(size, rng)) * 1000)
                    await asyncio.sleep(0.05)
    finally:
        gc.callbacks.remove(on_gc)
        stop.set()
        await tick_task
        worker.shutdown()
    out = [("idle", 0, {"lag_max": max(idle, default=0.0), "lag_p99": p99(idle)})]
    for (name, size), res in results.items():
        out.append((name, size, {k: statistics.median(v) for k, v in res.items()}))
    return out


def _migrate(url: str) -> None:
    """Django set up on the database at `url`, migrated."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def _sqlite_database() -> tuple[str, Any]:
    """A migrated throwaway SQLite file; returns its alias and the cleanup."""
    import shutil

    where = tempfile.mkdtemp(prefix="sb-usage-bench-db-")
    _migrate(f"sqlite:///{where}/usage.sqlite3")

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(where, ignore_errors=True)

    return "default", drop


def _database() -> tuple[str, Any]:
    """A migrated throwaway PostgreSQL database; returns its alias and the cleanup."""
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = os.environ.get(
            "SWITCHBOARD_TEST_POSTGRES_URL", "postgres://switchboard:switchboard@127.0.0.1:5432/switchboard"
        )
    base, _, name = url.rpartition("/")
    bench_db = f"{name}_usage_bench"
    admin = f"{base}/postgres"  # create and drop from the maintenance database
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{bench_db}"')
    except psycopg.Error as exc:
        raise SystemExit(f"usage_writer_bench needs a PostgreSQL server (DATABASE_URL=postgres://...): {exc}") from exc
    _migrate(f"{base}/{bench_db}")

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')

    return "default", drop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500", help="comma-separated batch sizes")
    parser.add_argument("--repeat", type=int, default=11, help="batches per path and size (interleaved)")
    parser.add_argument(
        "--database", choices=("postgresql", "sqlite"), default="postgresql", help="sqlite: a throwaway file"
    )
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    # The serving process's GIL switch interval (gateway_project/asgi.py): how long the loop waits at
    # most for a thread that holds the GIL before it asks for it back. The default 5 ms would be the lag.
    sys.setswitchinterval(0.001)
    alias, drop = _sqlite_database() if args.database == "sqlite" else _database()
    # The request log stays at INFO (the default) but goes nowhere: a terminal would be the benchmark.
    sink_stream = io.StringIO()
    handler = logging.StreamHandler(sink_stream)
    requests_log = logging.getLogger("switchboard.requests")
    saved = requests_log.handlers[:]
    requests_log.handlers = [handler]
    requests_log.setLevel(logging.INFO)
    try:
        from django.db import connections

        started = time.perf_counter()
        rows = asyncio.run(measure(args, alias))
        elapsed = time.perf_counter() - started
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM routing_usagerecord")
            stored = cursor.fetchone()[0]
    finally:
        requests_log.handlers = saved
        drop()
    by = {(name, size): res for name, size, res in rows}
    idle = by[("idle", 0)]
    print(
        f"usage writer per batch, {'SQLite' if args.database == 'sqlite' else 'PostgreSQL'}, median of {args.repeat} interleaved drains ({stored:,} rows stored, "
        f"{elapsed:.1f} s, load average {os.getloadavg()[0]:.1f}); CPU = writer thread's thread_time, "
        "an upper bound on its GIL hold; loop lag = lateness of a 1 ms asyncio tick during the drain"
    )
    print(f"  idle loop lag: max {idle['lag_max']:.2f} ms, p99 {idle['lag_p99']:.2f} ms")
    print(
        f"  {'rows':>5} {'path':10} {'CPU ms':>8} {'wall ms':>8} {'lag max':>8} {'lag p99':>8} {'log ms':>7}"
        f" {'CPU/row µs':>10} {'GC ms':>6} {'GCs':>4}"
    )
    for size in args.sizes:
        for name in ("python", "statement"):
            r = by[(name, size)]
            print(
                f"  {size:5d} {name:10} {r['cpu']:8.2f} {r['wall']:8.2f} {r['lag_max']:8.2f} {r['lag_p99']:8.2f}"
                f" {r['log']:7.2f} {r['cpu'] * 1000 / size:10.1f} {r['gc_ms']:6.2f} {r['gcs']:4.0f}"
            )
        old, new = by[("python", size)], by[("statement", size)]
        print(
            f"  {size:5d} {'ratio':10} {old['cpu'] / max(new['cpu'], 1e-6):7.1f}x {old['wall'] / max(new['wall'], 1e-6):7.1f}x"
            f" {old['lag_max'] / max(new['lag_max'], 1e-6):7.1f}x {'':8} {'':7}   (python / statement)"
        )
    sys.stdout.flush()
    from bench import summary

    summary.save(
        "usage_writer" if args.database == "postgresql" else "usage_writer_sqlite",
        {
            str(size): {name: by[(name, size)] for name in ("python", "statement")}
            | {"cpu_ratio": round(by[("python", size)]["cpu"] / max(by[("statement", size)]["cpu"], 1e-6), 2)}
            for size in args.sizes
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
