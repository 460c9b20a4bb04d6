"""`python -m bench.config_scale`: import, rebuild and reload latency of a large configuration.

For each size (10 / 1 000 / 10 000 models; half as many fallback links, each to a
different target; one org per 10 models with 10 policies each) it imports the
generated document into a throwaway database through the import function
import_config uses, re-imports the export (a no-op), and times:

- import: the first import of the whole document (one transaction);
- re-import: importing the export again (must write nothing);
- rebuild: `live.load_from_db` (read + validate + build the snapshot), split in parts;
- reload-to-served: from the commit of one saved change to the moment the process
  serves the new snapshot, with the real version poller (SWITCHBOARD_CONFIG_POLL_S,
  the path a change made by another process takes; broadcasts only shorten it).

SQLite by default (a temporary file); DATABASE_URL=postgres://... runs it on PostgreSQL
(it creates and drops a database named after yours with a `_bench` suffix).
Figures: docs/configuration-at-scale.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

SIZES = (10, 1_000, 10_000)


def make_document(models: int, links: int | None = None, orgs: int | None = None, policies: int | None = None) -> dict:
    """A valid configuration of the given size; fallback link i goes from model i to a distinct target."""
    links = models // 2 if links is None else links
    orgs = max(1, models // 10) if orgs is None else orgs
    policies = orgs * 10 if policies is None else policies
    if links > models // 2:
        raise ValueError("at most one link per two models (each link has its own target)")
    providers = [
        {
            "name": f"prov-{p}",
            "base_url": f"http://127.0.0.1:{9100 + p}/v1",
            "api_key_env": f"SWITCHBOARD_UPSTREAM_PROV_{p}_KEY",
        }
        for p in range(10)
    ]
    model_list: list[dict[str, Any]] = []
    for i in range(models):
        item: dict[str, Any] = {
            "id": f"m-{i:05d}",
            "provider": f"prov-{i % 10}",
            "upstream_model": f"up-{i:05d}",
            "capabilities": ["chat", "streaming"] if i % 3 else ["chat", "streaming", "tools"],
        }
        if i % 4 == 0:
            item["context_window"] = 128000
        if i % 7 == 0:
            item["input_price_per_mtok"] = 0.15
            item["output_price_per_mtok"] = 0.6
        if i < links:
            item["fallbacks"] = [f"m-{i + models // 2:05d}"]
        model_list.append(item)
    org_list = []
    per_org, extra = divmod(policies, orgs)
    for o in range(orgs):
        count = per_org + (1 if o < extra else 0)
        org_policies = [
            {"pattern": f"m-{(o * 10 + k) % 10000:04d}*", "action": "allow" if k % 2 else "deny", "priority": 10 + k}
            for k in range(count)
        ]
        org_list.append(
            {
                "name": f"org-{o:05d}",
                "default_action": "allow",
                "agents": [{"name": "bot", "default_model": f"m-{o % models:05d}"}],
                "policies": org_policies,
            }
        )
    return {
        "resilience": {"max_retries": 2},
        "providers": providers,
        "models": model_list,
        "aliases": {f"alias-{i}": f"m-{i:05d}" for i in range(min(models, 100))},
        "orgs": org_list,
    }


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of this process: on a shared machine the wall clock also counts others' work."""
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def rebuild_parts() -> dict[str, float]:
    """Seconds spent reading, validating and building one snapshot."""
    import os as _os

    from routing.config import live
    from routing.config.document import document_from_db, gc_paused, key_rows_from_db
    from routing.config.snapshot import build_snapshot
    from routing.config.validation import validate_document

    with gc_paused():  # as live.load_from_db does
        read_s, doc = _cpu(document_from_db)
        validate_s, errors = _cpu(lambda: validate_document(doc))
        assert not errors, errors[:3]
        keys_s, keys = _cpu(key_rows_from_db)
        build_s, _ = _cpu(lambda: build_snapshot(doc, keys, _os.environ))
    wall_s, _ = _timed(live.load_from_db)
    return {"read": read_s + keys_s, "validate": validate_s, "build": build_s, "wall": wall_s}


def reload_to_served(samples: int = 5) -> list[float]:
    """Seconds from a committed change to the new snapshot being current, through the version poller."""
    from django.db import close_old_connections

    from providers.models import Model
    from routing.config import live
    from routing.runtime.background import config_poller

    live.rebuild_from_db("bench")
    loop = asyncio.new_event_loop()
    task_holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        task_holder["task"] = loop.create_task(config_poller())
        try:
            loop.run_forever()
        finally:
            close_old_connections()

    thread = threading.Thread(target=run, name="bench-poller", daemon=True)
    thread.start()
    out = []
    try:
        for n in range(samples):
            time.sleep(0.13 * (n + 1))  # land at different points of the poll interval
            before = live.current().version
            model = Model.objects.order_by("id").first()
            model.context_window = 1000 + n
            model.save()  # autocommit: committed on return
            start = time.perf_counter()
            while live.current().version == before:
                if time.perf_counter() - start > 30:
                    raise RuntimeError("the new configuration was never served")
                time.sleep(0.002)
            out.append(time.perf_counter() - start)
    finally:

        async def stop() -> None:
            task = task_holder["task"]
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            loop.stop()

        loop.call_soon_threadsafe(lambda: loop.create_task(stop()))
        thread.join(5)
    return out


def measure(models: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    from routing.config.live import read_version
    from routing.config.store import export_document, import_document

    call_command("flush", interactive=False, verbosity=0)
    doc = make_document(models)
    import_s, result = _timed(lambda: import_document(doc))
    assert result.changed
    exported = export_document()
    version = read_version()
    reimport_s, again = _timed(lambda: import_document(exported))
    assert not again.changed and read_version() == version, "re-importing the export wrote something"
    parts = [rebuild_parts() for _ in range(5)]
    best = min(parts, key=lambda p: p["read"] + p["validate"] + p["build"])
    wall = min(p["wall"] for p in parts)
    served = reload_to_served()
    return {
        "models": models,
        "links": models // 2,
        "orgs": max(1, models // 10),
        "policies": max(1, models // 10) * 10,
        "import_s": import_s,
        "reimport_s": reimport_s,
        "rebuild_cpu_s": best["read"] + best["validate"] + best["build"],
        "rebuild_wall_s": wall,
        "parts": best,
        "served_median_s": statistics.median(served),
        "served_max_s": max(served),
        "vendor": connection.vendor,
    }


def _setup(database_url: str | None) -> Callable[[], None]:
    """Point Django at a throwaway database and migrate it; returns the cleanup."""
    tmp = tempfile.TemporaryDirectory(prefix="sb-config-scale-")
    cleanup = [tmp.cleanup]
    if database_url and database_url.startswith("postgres"):
        import psycopg

        base, _, name = database_url.rpartition("/")
        bench_db = f"{name}_bench"
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}"')
            conn.execute(f'CREATE DATABASE "{bench_db}"')
        os.environ["DATABASE_URL"] = f"{base}/{bench_db}"

        def drop() -> None:
            from django.db import connections

            connections.close_all()
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}"')

        cleanup.insert(0, drop)
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    os.environ.setdefault("SWITCHBOARD_CONFIG_POLL_S", "0.5")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)

    def done() -> None:
        for fn in cleanup:
            fn()

    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated model counts")
    args = parser.parse_args(argv)
    import logging

    done = _setup(os.environ.get("DATABASE_URL"))
    logging.getLogger("switchboard.config").setLevel(logging.WARNING)  # one line per reload otherwise
    try:
        from django.conf import settings

        load = os.getloadavg()[0]
        print(f"poll interval {settings.SWITCHBOARD_CONFIG_POLL_S}s; times in ms; load average {load:.1f}")
        print(
            "models  links  policies  import  re-import  rebuild wall  rebuild CPU (read+validate+build)"
            "  reload-to-served median/max"
        )
        for size in (int(s) for s in args.sizes.split(",")):
            r = measure(size)
            p = r["parts"]
            parts = f"{r['rebuild_cpu_s'] * 1000:.0f} ({p['read'] * 1000:.0f}+{p['validate'] * 1000:.0f}+{p['build'] * 1000:.0f})"
            print(
                f"{r['models']:>6} {r['links']:>6} {r['policies']:>9} {r['import_s'] * 1000:>7.0f} "
                f"{r['reimport_s'] * 1000:>10.0f} {r['rebuild_wall_s'] * 1000:>13.0f}  {parts:<33}"
                f"{r['served_median_s'] * 1000:>8.0f}/{r['served_max_s'] * 1000:.0f}  [{r['vendor']}]",
                flush=True,
            )
    finally:
        done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
