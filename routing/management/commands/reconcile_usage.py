"""`manage.py reconcile_usage FILE [--provider NAME] [--start DAY --end DAY]`: the gateway's usage records
against a provider's usage or cost export, per day and model, with the drift (docs/commands.md#reconcile_usage)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from providers.models import Deployment, Model
from routing.models import UsageRecord
from routing.ops.usage import reconcile


class Command(BaseCommand):
    help = (
        "Compare the gateway's recorded tokens and cost with a provider's usage export (OpenAI's or "
        "Anthropic's usage/cost API JSON, or a CSV with date, model, input_tokens, output_tokens, cost), "
        "per UTC day and model, for the export's period; names the days and models one side lacks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the provider's export (JSON page(s) of the usage or cost API, or CSV)")
        parser.add_argument("--provider", help="only the gateway records of this provider (its name in the config)")
        parser.add_argument("--start", help="first UTC day (YYYY-MM-DD); default: the export's first")
        parser.add_argument("--end", help="last UTC day, included; default: the export's last")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            with path.open("rb") as handle:  # no further than the bound: a device or a huge file is refused
                data = handle.read(reconcile.MAX_EXPORT_BYTES + 1)
            export = reconcile.read_export(path.name, data)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        except reconcile.ExportError as exc:
            raise CommandError(f"{reconcile.shown(path)}: {exc}") from None
        start = _day(options["start"], "--start") if options["start"] else export.start
        end = _day(options["end"], "--end") + timedelta(days=1) if options["end"] else export.end
        if start is None or end is None:
            raise CommandError(f"{path} holds no usage: nothing to compare (give --start and --end for a period)")
        ours = reconcile.gateway_totals(_records(start, end, options["provider"]), _upstream_names())
        theirs = {key: totals for key, totals in export.rows.items() if start.date() <= key[0] < end.date()}
        lines = reconcile.compare(ours, theirs)
        self.stdout.write(f"period {start.date()} .. {(end - timedelta(days=1)).date()} (UTC), {path.name}")
        for text in reconcile.report(lines):
            self.stdout.write(text)
        self.stdout.write(_summary(lines, reconcile))


def _day(text: str, option: str) -> datetime:
    try:
        day = datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise CommandError(f"{option} {text!r} is not a day: use YYYY-MM-DD, e.g. 2026-01-31") from None
    return day.replace(tzinfo=UTC)


def _records(start: datetime, end: datetime, provider: str | None) -> Any:
    rows = UsageRecord.objects.filter(created_at__gte=start, created_at__lt=end, cached=False).exclude(model_used="")
    if provider:
        rows = rows.filter(provider=provider)
    fields = ("created_at", "model_used", "provider", "prompt_tokens", "completion_tokens", "cost", "cached")
    return rows.values(*fields).iterator(chunk_size=5000)


def _upstream_names() -> dict[tuple[str, str], str]:
    """(gateway model id, provider name) -> the model name sent to that provider, from the configuration."""

    names = {
        (m.public_id, m.provider.name): m.upstream_model
        for m in Model.objects.select_related("provider").exclude(provider=None)
    }
    for d in Deployment.objects.select_related("model", "provider"):
        names[(d.model.public_id, d.provider.name)] = d.upstream_model
    return names


def _summary(lines: list[Any], reconcile: Any) -> str:
    missing_gw = [f"{line.day} {reconcile.shown(line.model)}" for line in lines if line.missing == "gateway"]
    missing_prov = [f"{line.day} {reconcile.shown(line.model)}" for line in lines if line.missing == "provider"]
    both = [line for line in lines if not line.missing]
    drifting = [
        line
        for line in both
        if any(
            d not in (None, 0)
            for d in (
                reconcile.drift(line.gateway.prompt, line.provider.prompt),
                reconcile.drift(line.gateway.completion, line.provider.completion),
                reconcile.drift(line.gateway.cost, line.provider.cost),
            )
        )
    ]
    parts = [f"{len(both) - len(drifting)} of {len(both)} day/model lines on both sides with 0 drift"]
    if drifting:
        parts.append("drift on " + ", ".join(f"{line.day} {reconcile.shown(line.model)}" for line in drifting))
    if missing_gw:
        parts.append("missing in the gateway: " + ", ".join(missing_gw))
    if missing_prov:
        parts.append("missing in the provider export: " + ", ".join(missing_prov))
    return "; ".join(parts)
