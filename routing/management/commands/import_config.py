"""`manage.py import_config FILE [--prune] [--dry-run]` (CONTRACT §9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config.store import ConfigInvalid, import_document, load_yaml


class Command(BaseCommand):
    help = "Validate a configuration YAML file and apply it in one transaction, or change nothing and list every error."
    # The system check validates the database configuration: it must not stop the import that fixes it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="Configuration YAML (the format export_config prints).")
        parser.add_argument(
            "--prune", action="store_true", help="Delete providers, models, aliases and orgs that are not in the file."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Validate and report what would change, then roll back."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            result = import_document(
                load_yaml(text, source=str(path)), prune=options["prune"], dry_run=options["dry_run"]
            )
        except ConfigInvalid as exc:
            lines = "\n".join(f"  {error}" for error in exc.errors)
            raise CommandError(f"{path} has {len(exc.errors)} error(s); nothing was changed:\n{lines}") from exc
        prefix = "Dry run, nothing saved: would have " if options["dry_run"] else ""
        summary = result.summary()
        self.stdout.write(prefix + (summary[0].lower() + summary[1:] if prefix else summary))
