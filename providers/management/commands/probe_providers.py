"""`manage.py probe_providers [--provider NAME] [--json]` (docs/commands.md#probe_providers).

Probes providers now, from this process, with the configuration in the database,
and stores the results, which every running server adopts within
SWITCHBOARD_HEALTH_SHARED_POLL_S (/health/providers, the dashboard).
Exit status: 0 when every probed provider is up, 1 otherwise, 2 when nothing can be
probed: an unknown provider name, or a configuration that does not validate.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError

from routing.config import live
from routing.runtime.observe.health import UP, probe_all, publish_results, store_results


class Command(BaseCommand):
    help = "Probe providers' health URLs now; exit 0 when all probed providers are up, 1 otherwise."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--provider", action="append", metavar="NAME", help="Probe only this provider (repeatable)."
        )
        parser.add_argument("--json", action="store_true", help="Print a JSON list instead of a table.")
        parser.add_argument("--timeout", type=float, default=5.0, help="Seconds to wait for each provider (default 5).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            snapshot = live.load_snapshot()
        except live.InvalidConfiguration as exc:
            raise CommandError(str(exc), returncode=2) from None
        names = options["provider"] or sorted(snapshot.providers)
        unknown = [n for n in names if n not in snapshot.providers]
        if unknown:
            known = ", ".join(sorted(snapshot.providers)) or "none configured"
            raise CommandError(f"unknown provider {', '.join(unknown)}; configured providers: {known}", returncode=2)
        if not names:
            self.stderr.write("No providers are configured; nothing to probe.")
            return

        results = asyncio.run(probe_all(snapshot, names, timeout_s=options["timeout"]))
        try:
            store_results(results)  # every serving process adopts them (docs/operations.md#shared-probe-results)
        except Exception as exc:  # noqa: BLE001 - the probe itself still answers
            self.stderr.write(f"warning: could not store the results for the running servers: {exc}")
        try:
            publish_results(results)  # sooner, with Redis; the rows above are the durable path
        except Exception as exc:  # noqa: BLE001 - Redis down: the servers read the rows
            self.stderr.write(f"warning: could not publish the results to the running servers: {exc}")

        if options["json"]:
            self.stdout.write(orjson.dumps([r.as_dict() for r in results], option=orjson.OPT_INDENT_2).decode())
        else:
            self.stdout.write(_table(results))
        if any(r.status != UP for r in results):
            sys.exit(1)


def _table(results: list[Any]) -> str:
    rows = [("PROVIDER", "STATUS", "LATENCY", "CHECKED", "DETAIL")]
    for r in results:
        latency = f"{r.latency_ms:.1f} ms" if r.latency_ms is not None else "-"
        rows.append((r.name, r.status, latency, r.checked_at or "-", r.detail))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]
    return "\n".join(line.rstrip() for line in lines)
