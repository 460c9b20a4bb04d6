"""`manage.py export_config [--output FILE]`: the configuration as YAML (docs/commands.md#export_config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from routing.config.store import dump_yaml, export_document


class Command(BaseCommand):
    help = "Print the current configuration as YAML, in the format import_config reads."
    requires_system_checks: list[str] = []  # exporting a broken configuration is how you fix it

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", help="Write to this file instead of standard output.")

    def handle(self, *args: Any, **options: Any) -> None:
        text = dump_yaml(export_document())
        if options["output"]:
            Path(options["output"]).write_text(text, encoding="utf-8")
            self.stderr.write(f"Wrote {options['output']}")
        else:
            self.stdout.write(text, ending="")
