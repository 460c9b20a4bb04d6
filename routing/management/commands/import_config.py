"""`manage.py import_config FILE [--prune] [--dry-run] [--progress]` (docs/configuration-at-scale.md#import).

Large files take seconds; on a terminal (or with --progress) a progress line on
stderr says which phase the import is in.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config import recorder
from routing.config.store import MAX_YAML_BYTES, ConfigInvalid, import_document, load_yaml


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """One status line on stderr, rewritten in place, with the seconds since the start."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.tty = _is_tty(stream)

    def __call__(self, message: str) -> None:
        line = f"import_config [{time.monotonic() - self.start:5.1f}s] {message}"
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if message == "done" else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _read(path: Path) -> str:
    """The file's text, read no further than MAX_YAML_BYTES (a device or a huge file is refused, not slurped)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_YAML_BYTES:
        raise CommandError(f"{path} is larger than {MAX_YAML_BYTES // 1048576} MiB; nothing was changed: split it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"{path} is not UTF-8 text (byte {exc.start + 1}); nothing was changed: save it as UTF-8"
        ) from None


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
        parser.add_argument(
            "--progress",
            action="store_true",
            help="Print a progress line per phase on stderr (the default when stderr is a terminal).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        text = _read(path)
        progress = ProgressLine(self.stderr._out) if options["progress"] or _is_tty(self.stderr._out) else None
        try:
            if progress:
                progress("parsing " + str(path))
            doc = load_yaml(text, source=str(path))  # before the change opens: a bad file touches nothing
            with recorder.change(author=recorder.command_author(), source="import_config", note=path.name):
                result = import_document(
                    doc,
                    prune=options["prune"],
                    dry_run=options["dry_run"],
                    progress=progress,
                )
        except ConfigInvalid as exc:
            lines = "\n".join(f"  {error}" for error in exc.errors)
            raise CommandError(f"{path} has {len(exc.errors)} error(s); nothing was changed:\n{lines}") from exc
        prefix = "Dry run, nothing saved: would have " if options["dry_run"] else ""
        summary = result.summary()
        self.stdout.write(prefix + (summary[0].lower() + summary[1:] if prefix else summary))
