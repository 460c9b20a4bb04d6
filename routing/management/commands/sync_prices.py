"""`manage.py sync_prices [--from FILE] [--day YYYY-MM-DD] [--accept MODEL] [--reject MODEL]`
(docs/commands.md#sync_prices)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config import price_proposals
from routing.config.document import document_from_db
from routing.config.price_catalogue import FileCatalogue, PackageCatalogue, propose, today
from routing.config.store import ConfigInvalid, load_yaml


class Command(BaseCommand):
    help = (
        "Compare the configured models' prices with a maintained catalogue (genai-prices, or --from FILE) and "
        "propose a dated price version for each that differs; accept or reject them here or in the admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="source", help="A YAML/JSON catalogue file instead of genai-prices.")
        parser.add_argument("--day", help="The proposals' effective_from (default: today, UTC).")
        parser.add_argument("--accept", metavar="MODEL", help="Accept the proposal waiting for MODEL.")
        parser.add_argument("--reject", metavar="MODEL", help="Reject the proposal waiting for MODEL.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["accept"]:
                p = price_proposals.accept(options["accept"], author="sync_prices")
                self.stdout.write(f"accepted: {p.model} priced from {p.effective_from}: {'; '.join(p.changes())}")
                return
            if options["reject"]:
                p = price_proposals.reject(options["reject"])
                self.stdout.write(f"rejected: {p.model}")
                return
        except price_proposals.NoProposal as exc:
            raise CommandError(str(exc)) from exc
        except ConfigInvalid as exc:
            raise CommandError(f"the proposal does not validate, nothing was changed:\n{exc}") from exc
        self._compare(options["source"], options["day"])

    def _compare(self, source: str | None, day_text: str | None) -> None:
        try:
            day = date.fromisoformat(day_text) if day_text else today()
        except ValueError as exc:
            raise CommandError(f"--day must be a date such as 2026-01-01, got {day_text!r}") from exc
        if source:
            try:
                catalogue: Any = FileCatalogue(load_yaml(Path(source).read_text(encoding="utf-8"), source))
            except (OSError, ValueError, ConfigInvalid) as exc:
                raise CommandError(f"cannot read the catalogue {source}: {exc}") from exc
        else:
            catalogue = PackageCatalogue()
        proposals, notes = propose(document_from_db(), catalogue, day)
        price_proposals.save(proposals)
        for p in proposals:
            self.stdout.write(
                f"proposed: {p.model} ({p.upstream_model}) from {p.effective_from}: {'; '.join(p.changes())}"
            )
        for note in notes:
            self.stdout.write(f"left as is: {note}")
        self.stdout.write(
            f"{len(proposals)} proposal(s) wait: accept with --accept MODEL or on the admin's price proposals page"
        )
