"""`manage.py config_history [--limit N] [--json] [--diff A B] [--show V]` (docs/commands.md#config_history)."""

from __future__ import annotations

from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config import history
from routing.config.diff import render
from routing.config.store import dump_yaml


class Command(BaseCommand):
    help = "List the recorded configuration versions, newest first, with what each changed."
    requires_system_checks: list[str] = []  # the history is how a broken configuration is understood

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, help="Show at most N versions (the newest).")
        parser.add_argument("--json", action="store_true", help="Print a JSON list instead of text.")
        parser.add_argument(
            "--diff", nargs=2, type=int, metavar=("A", "B"), help="Print the changes from version A to version B."
        )
        parser.add_argument("--show", type=int, metavar="V", help="Print version V's configuration as YAML.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["show"] is not None:
                self.stdout.write(dump_yaml(history.revision_document(options["show"])), ending="")
                return
            if options["diff"]:
                old, new = options["diff"]
                changes = history.diff_versions(old, new)
                if options["json"]:
                    self.stdout.write(orjson.dumps(changes, option=orjson.OPT_INDENT_2).decode())
                else:
                    self.stdout.write("\n".join(render(changes)) or f"versions {old} and {new} are the same")
                return
            revisions = history.list_revisions(options["limit"])
        except history.HistoryError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            rows = [r.as_json() for r in revisions]
            self.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
            return
        if not revisions:
            self.stdout.write("No configuration versions recorded yet.")
            return
        for r in revisions:
            when = r.created_at.strftime("%Y-%m-%d %H:%M:%S %Z")
            self.stdout.write(f"v{r.version}  {when}  {r.author}  ({r.source})  {r.summary}")
            for line in r.diff_lines():
                self.stdout.write(f"    {line}")
