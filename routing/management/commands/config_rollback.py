"""`manage.py config_rollback VERSION [--dry-run] [--force]` (docs/commands.md#config_rollback)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config import history, recorder


class Command(BaseCommand):
    help = "Restore a recorded configuration version, validated as an import, as a new version."
    requires_system_checks: list[str] = []  # a rollback is how a broken configuration is repaired

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("version", type=int, help="The version to restore (see config_history).")
        parser.add_argument("--dry-run", action="store_true", help="Validate and print the changes; save nothing.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Roll back even when it removes agents whose API keys are active (those keys stop working).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        version = options["version"]
        try:
            result = history.rollback(
                version, author=recorder.command_author(), dry_run=options["dry_run"], force=options["force"]
            )
        except history.KeysWouldBeRemoved as exc:
            raise CommandError(f"{exc}. Run it again with --force to roll back anyway.") from exc
        except history.HistoryError as exc:
            raise CommandError(str(exc)) from exc
        for line in result.diff_lines():
            self.stdout.write(f"  {line}")
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        if options["dry_run"]:
            n = len(result.changes)
            self.stdout.write(f"Dry run, nothing saved: rolling back to version {version} would make {n} change(s).")
        elif result.version is None:
            self.stdout.write(f"No changes: the configuration already is version {version}'s.")
        else:
            self.stdout.write(
                f"Rolled back to version {version}: recorded as version {result.version} "
                f"({len(result.changes)} change(s)); serving processes reload it now."
            )
