"""`manage.py usage_rollup [--since-hours N]`: recompute the analytics' hourly aggregates from the usage records."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from routing.runtime.usage import rollup


class Command(BaseCommand):
    help = (
        "Recompute the hourly usage aggregates the analytics page reads (docs/operations.md#analytics), "
        "from the usage records: once after upgrading to a version that has them, or after rows were "
        "inserted behind the usage writer's back."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since-hours", type=int, default=None, help="only the last N hours (default: every record)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["since_hours"]
        if hours is not None and hours <= 0:
            raise CommandError("--since-hours must be a positive number of hours")
        since = timezone.now() - timedelta(hours=hours) if hours else None
        written = rollup.rebuild(since)
        scope = f"the last {hours} h" if hours else "all usage records"
        self.stdout.write(f"rebuilt {written} hourly aggregate rows from {scope}")
