"""`python -m bench.analytics`: query time of each analytics view and request-log search on many usage rows.

Generates ROWS usage records (default 1 000 000) spread over the last 30 days in a
throwaway database (DATABASE_URL=postgres://... : a database named after yours with a
`_bench` suffix, created and dropped; else a temporary SQLite file, where the default
is 100 000 rows), with 20 orgs, 200 keys, 30 models and 6 providers, 2 % 5xx and 5 %
fallbacks (with the hourly aggregates the usage writer keeps), then times each query
the pages run (median of --repeat runs, warm cache).
Figures: docs/operations.md#analytics-performance.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

PG_INSERT = """
INSERT INTO routing_usagerecord (record_id, request_id, created_at, org, agent, key_prefix, endpoint,
    requested_model, resolved_model, model_used, provider, fallback_reason, attempts, status, error_code,
    prompt_tokens, completion_tokens, cost, latency_ms, ttft_ms, streamed, tokens_estimated, trail)
SELECT md5(g::text), 'bench-' || g, now() - (random() * interval '30 days'),
    'org-' || (g %% 20), 'agent-' || (g %% 5), 'sb-' || lpad((g %% 200)::text, 7, '0'), 'chat',
    'model-' || (g %% 30), 'model-' || (g %% 30), 'model-' || (g %% 30), 'prov-' || (g %% 6),
    CASE WHEN g %% 20 = 0 THEN 'upstream_5xx' ELSE '' END, 1 + (g %% 20 = 0)::int,
    CASE WHEN g %% 50 = 0 THEN 502 WHEN g %% 33 = 0 THEN 429 ELSE 200 END,
    CASE WHEN g %% 50 = 0 THEN 'upstream_unavailable' ELSE '' END,
    100 + g %% 900, 20 + g %% 300, ((100 + g %% 900) * 2 + (20 + g %% 300) * 8) / 1e6,
    20 + random() * random() * 3000, NULL, false, false, '[]'::jsonb
FROM generate_series(%s, %s) g
"""


def _fill_postgres(rows: int) -> None:
    from django.db import connection

    chunk = 200_000
    with connection.cursor() as cursor:
        for start in range(1, rows + 1, chunk):
            cursor.execute(PG_INSERT, [start, min(rows, start + chunk - 1)])
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE routing_usagerecord")


def _fill_sqlite(rows: int) -> None:
    import random
    from datetime import UTC, datetime, timedelta

    from routing.runtime import usage

    rng = random.Random(7)
    now = datetime.now(tz=UTC)
    batch = []
    for g in range(1, rows + 1):
        batch.append(
            {
                "record_id": f"{g:032x}",
                "request_id": f"bench-{g}",
                "created_at": now - timedelta(seconds=rng.random() * 30 * 86400),
                "org": f"org-{g % 20}",
                "agent": f"agent-{g % 5}",
                "key_prefix": f"sb-{g % 200:07d}",
                "endpoint": "chat",
                "requested_model": f"model-{g % 30}",
                "model_used": f"model-{g % 30}",
                "provider": f"prov-{g % 6}",
                "fallback_reason": "upstream_5xx" if g % 20 == 0 else "",
                "status": 502 if g % 50 == 0 else 429 if g % 33 == 0 else 200,
                "prompt_tokens": 100 + g % 900,
                "completion_tokens": 20 + g % 300,
                "cost": ((100 + g % 900) * 2 + (20 + g % 300) * 8) / 1e6,
                "latency_ms": 20 + rng.random() * rng.random() * 3000,
            }
        )
        if len(batch) == 5000:
            usage.db_insert(batch)
            batch = []
    if batch:
        usage.db_insert(batch)


def _timed(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def cases() -> list[tuple[str, Callable[[], Any]]]:
    """(name, query) per chart and search the pages run."""
    from routing.ops.usage import analytics, browse

    now = time.time()
    out: list[tuple[str, Callable[[], Any]]] = []
    for rng in analytics.RANGES:
        for label, filters in (("all", {}), ("org", {"org": "org-3"}), ("model", {"model": "model-7"})):
            view = analytics.View.parse({"range": rng, **filters}, now=now)
            out.append((f"{rng:5} {label:5} series", lambda v=view: analytics.series(v)))
            out.append((f"{rng:5} {label:5} latency", lambda v=view: analytics.latency(v)))
            out.append((f"{rng:5} {label:5} top keys", lambda v=view: analytics.top(v, "keys")))
        view = analytics.View.parse({"range": rng, "key": "sb-0000042"}, now=now)
        out.append((f"{rng:5} key   all charts", lambda v=view: analytics.build(v)))
    for label, params in (
        ("newest page", {}),
        ("by request id", {"request_id": "bench-4242"}),
        ("5xx, one org", {"status": "5xx", "org": "org-0"}),
        ("one key, 2nd page", {"key": "sb-0000042", "before": "900000"}),
        ("fallback reason", {"fallback_reason": "upstream_5xx", "since": "24"}),
    ):
        search = browse.Search.parse(params)
        out.append((f"log   {label}", lambda s=search: browse.find(s)))
    return out


def _reuse() -> Callable[[], None]:
    """The `_bench` database of an earlier --reuse run (created when missing), migrated; nothing to clean."""
    import django
    import psycopg

    base, _, name = os.environ["DATABASE_URL"].rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    return lambda: None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="usage rows (default 1e6 on PostgreSQL, 1e5 on SQLite)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep the database and its rows for the next run")
    args = parser.parse_args(argv)
    from bench.config_scale import _setup

    url = os.environ.get("DATABASE_URL", "")
    if args.reuse and url.startswith("postgres"):
        os.environ["DATABASE_URL"] = url + "_bench"
        done = _reuse()
    else:
        done = _setup(url)
    try:
        from django.db import connection

        from routing.models import UsageRecord, UsageRollup
        from routing.runtime.usage import rollup

        postgres = connection.vendor == "postgresql"
        rows = args.rows or (1_000_000 if postgres else 100_000)
        started = time.perf_counter()
        if UsageRecord.objects.count() != rows:
            UsageRecord.objects.all().delete()
            UsageRollup.objects.all().delete()
            (_fill_postgres if postgres else _fill_sqlite)(rows)
        filled = time.perf_counter() - started
        if not UsageRollup.objects.exists():  # rows made in SQL: the aggregates the usage writer would keep
            rollup.rebuild()
            if postgres:
                import psycopg

                with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE routing_usagerollup")
        rebuilt = time.perf_counter() - started - filled
        print(
            f"{rows:,} usage rows on {connection.vendor} ({filled:.1f} s), {UsageRollup.objects.count():,} "
            f"hourly aggregate rows ({rebuilt:.1f} s: manage.py usage_rollup); median of {args.repeat} runs, ms; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        worst = 0.0
        for name, fn in cases():
            fn()  # warm
            ms = _timed(fn, args.repeat)
            worst = max(worst, ms)
            print(f"  {name:32} {ms:9.1f}")
        print(f"slowest: {worst:.1f} ms")
    finally:
        done()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
