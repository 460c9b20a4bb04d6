"""Reconcile the gateway's usage records with a provider's usage export (docs/commands.md#reconcile_usage).

A provider's invoice is the truth the budgets try to match. `read_export` reads what the
provider says it billed, per UTC day and provider model name, from the shapes the providers
publish: OpenAI's usage API (`/v1/organization/usage/completions`, grouped by model) and costs
API (`/v1/organization/costs`, grouped by line item), Anthropic's usage report
(`/v1/organizations/usage_report/messages`, grouped by model) and cost report
(`/v1/organizations/cost_report`, amounts in cents), or a CSV with a header naming a day, a
model, tokens and/or a cost. `gateway_totals` sums the usage records of the same period the
same way (the gateway model mapped to the upstream model name it sends), and `compare`
lines them up: per day and model, both sides' tokens and cost and the drift, and the keys
present on one side only, named.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

Key = tuple[date, str]  # (UTC day, the provider's model name)
# Bounds of an export (docs/commands.md#reconcile_usage): the file is read no further than MAX_EXPORT_BYTES
# (a year of daily rows per model is a few MiB); token counts and times past these are no real usage.
MAX_EXPORT_BYTES = 256 * 1024 * 1024
MAX_TOKENS = 10**18
_EPOCH_RANGE = (0, 253402300799)  # 1970-01-01 .. 9999-12-31T23:59:59Z


class ExportError(ValueError):
    """The file is not a usage export this command reads; the message says what was expected."""


@dataclass
class Totals:
    """Tokens and cost of one day and model; None: that side did not report it."""

    prompt: int | None = None
    completion: int | None = None
    cost: Decimal | None = None
    requests: int = 0

    def add(self, prompt: int | None, completion: int | None, cost: Decimal | None, requests: int = 0) -> None:
        if prompt is not None:
            self.prompt = (self.prompt or 0) + prompt
        if completion is not None:
            self.completion = (self.completion or 0) + completion
        if cost is not None:
            self.cost = (self.cost or Decimal(0)) + cost
        self.requests += requests


@dataclass
class Export:
    """What the provider reported, and the period it covers ([start, end), UTC)."""

    rows: dict[Key, Totals] = field(default_factory=dict)
    start: datetime | None = None
    end: datetime | None = None

    def totals(self, day: date, model: str) -> Totals:
        return self.rows.setdefault((day, model), Totals())

    def cover(self, start: datetime, end: datetime) -> None:
        self.start = start if self.start is None else min(self.start, start)
        self.end = end if self.end is None else max(self.end, end)


def shown(text: Any) -> str:
    """`text` for a terminal: control and invisible characters from the export written as escapes
    (\x1b, \u202e), so a model name cannot move the cursor, recolour or retitle the operator's terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any) -> int:
    if value in (None, ""):
        return 0
    try:
        number = Decimal(str(value))
        if not number.is_finite() or abs(number) >= MAX_TOKENS:
            raise ValueError
        return int(number)
    except (ArithmeticError, ValueError):
        raise ExportError(f"{_short(value)} is not a number of tokens (a whole number below 10^18)") from None


def _usd_of(value: Any, divisor: int = 1) -> Decimal:
    try:
        amount = Decimal(str(value).strip().lstrip("$")) / divisor
        if not amount.is_finite() or abs(amount) >= MAX_TOKENS:
            raise ValueError
    except (ArithmeticError, ValueError):
        raise ExportError(f"{_short(value)} is not an amount of money such as 12.50") from None
    return amount


def _time(value: Any) -> datetime:
    """An epoch number (OpenAI) or an ISO 8601 time or date (Anthropic, CSV), as UTC."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not _EPOCH_RANGE[0] <= value <= _EPOCH_RANGE[1]:
            raise ExportError(f"{_short(value)} is not a time: an epoch number from 0 to 253402300799 (year 9999)")
        return datetime.fromtimestamp(value, UTC)
    text = str(value).strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ExportError(f"{value!r} is not a time: use an epoch number or an ISO date such as 2026-01-31") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def read_export(name: str, data: bytes) -> Export:
    """The export in `data` (a file called `name`): JSON from a usage or cost API, or CSV, in UTF-8."""
    if len(data) > MAX_EXPORT_BYTES:
        bound = f"{MAX_EXPORT_BYTES // 1048576} MiB" if MAX_EXPORT_BYTES >= 1048576 else f"{MAX_EXPORT_BYTES} bytes"
        raise ExportError(f"{shown(name)} is larger than {bound}: export a shorter period")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ExportError(f"{name} is UTF-16 text: save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)")
    text = data.lstrip()
    if text.startswith((b"{", b"[")):
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ExportError(f"{name} is not valid JSON ({exc})") from None
        return _read_json(payload)
    try:
        decoded = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExportError(f"{name} is not UTF-8 text (byte {exc.start + 1}): save it as UTF-8") from None
    return _read_csv(decoded)


def _read_json(payload: Any) -> Export:
    pages = payload if isinstance(payload, list) else [payload]  # one page, or the pages of a paginated read
    export = Export()
    for page in pages:
        buckets = page.get("data") if isinstance(page, dict) else None
        if not isinstance(buckets, list):
            raise ExportError("a JSON export must be a page of the usage or cost API: an object with a `data` list")
        for bucket in buckets:
            if not isinstance(bucket, dict) or not isinstance(bucket.get("results"), list):
                raise ExportError("each bucket of `data` must have `results` (export with a daily bucket width)")
            start = _time(bucket.get("start_time", bucket.get("starting_at")))
            end = bucket.get("end_time", bucket.get("ending_at"))
            export.cover(start, _time(end) if end is not None else start + timedelta(days=1))
            for result in bucket["results"]:
                if isinstance(result, dict):
                    _read_result(export, start.date(), result)
    return export


def _read_result(export: Export, day: date, r: Mapping[str, Any]) -> None:
    if "amount" in r:  # a cost line: OpenAI {value, currency} in dollars; Anthropic a decimal string of cents
        amount = r["amount"]
        if isinstance(amount, dict):
            usd = _usd_of(amount.get("value") or 0)
            model = str(r.get("line_item") or "").split(",")[0].strip()
        else:
            usd = _usd_of(amount, 100)
            model = str(r.get("model") or "")
        export.totals(day, model or "(no model)").add(None, None, usd)
        return
    model = str(r.get("model") or "")
    if not model:
        raise ExportError("a usage result has no model: export the usage grouped by model (group_by=model)")
    if "uncached_input_tokens" in r:  # Anthropic: the prompt is uncached + cache writes + cache reads
        writes = r.get("cache_creation") if isinstance(r.get("cache_creation"), dict) else {}
        prompt = (
            _int(r.get("uncached_input_tokens"))
            + _int(writes.get("ephemeral_5m_input_tokens"))
            + _int(writes.get("ephemeral_1h_input_tokens"))
            + _int(r.get("cache_read_input_tokens"))
        )
        export.totals(day, model).add(prompt, _int(r.get("output_tokens")), None)
        return
    # OpenAI: input_tokens includes the cached and audio input tokens, as the record's prompt_tokens does
    export.totals(day, model).add(
        _int(r.get("input_tokens")), _int(r.get("output_tokens")), None, _int(r.get("num_model_requests"))
    )


_CSV_COLUMNS = {
    "day": ("date", "day", "start_time", "starting_at", "usage_date"),
    "model": ("model", "model_name"),
    "prompt": ("input_tokens", "prompt_tokens", "n_context_tokens_total"),
    "completion": ("output_tokens", "completion_tokens", "n_generated_tokens_total"),
    "cost": ("cost", "cost_usd", "amount_usd", "amount"),
}


def _read_csv(text: str) -> Export:
    reader = csv.DictReader(io.StringIO(text))
    try:
        return _read_rows(reader)
    except csv.Error as exc:  # a field over csv.field_size_limit() (128 KiB), a NUL, ...
        raise ExportError(f"line {reader.line_num + 1} is not CSV this command reads: {exc}") from None


def _read_rows(reader: csv.DictReader) -> Export:
    header = [shown(h.strip().lower()) for h in reader.fieldnames or ()]
    found = {what: next((h for h in names if h in header), None) for what, names in _CSV_COLUMNS.items()}
    if found["day"] is None or found["model"] is None or not (found["prompt"] or found["cost"]):
        raise ExportError(
            "a CSV export needs a header with a day (date), a model, and tokens (input_tokens, output_tokens) "
            f"and/or a cost (cost, in USD); this one has {', '.join(header) or 'no header'}"
        )
    export = Export()
    for raw in reader:
        row = {(k or "").strip().lower(): v for k, v in raw.items()}
        start = _time(row[found["day"]])
        start = datetime(start.year, start.month, start.day, tzinfo=UTC)
        export.cover(start, start + timedelta(days=1))
        cost = row.get(found["cost"]) if found["cost"] else None
        export.totals(start.date(), (row[found["model"]] or "").strip()).add(
            _int(row[found["prompt"]]) if found["prompt"] else None,
            _int(row[found["completion"]]) if found["completion"] else None,
            _usd_of(cost) if cost not in (None, "") else None,
        )
    return export


def gateway_totals(
    records: Iterable[Mapping[str, Any]], upstream_of: Mapping[tuple[str, str], str]
) -> dict[Key, Totals]:
    """The usage records summed per UTC day and upstream model name (`upstream_of`: (model id, provider) ->
    the name sent upstream; a record of a model no longer configured keeps its gateway id)."""
    out: dict[Key, Totals] = {}
    for r in records:
        if r.get("cached"):
            continue  # answered by the response cache: no upstream call, not on the provider's bill
        created = r["created_at"]
        day = (created if created.tzinfo else created.replace(tzinfo=UTC)).astimezone(UTC).date()
        model = upstream_of.get((r["model_used"], r["provider"]), r["model_used"])
        cost = r.get("cost")
        out.setdefault((day, model), Totals()).add(
            r.get("prompt_tokens") or 0, r.get("completion_tokens") or 0, Decimal(str(cost or 0)), 1
        )
    return out


@dataclass
class Line:
    day: date
    model: str
    gateway: Totals | None
    provider: Totals | None

    @property
    def missing(self) -> str:
        """Which side has no record of this day and model ("" when both have)."""
        if self.gateway is None:
            return "gateway"
        return "provider" if self.provider is None else ""


def compare(gateway: Mapping[Key, Totals], provider: Mapping[Key, Totals]) -> list[Line]:
    """One line per day and model of either side, in order."""
    return [
        Line(day, model, gateway.get((day, model)), provider.get((day, model)))
        for day, model in sorted({*gateway, *provider})
    ]


def drift(ours: int | Decimal | None, theirs: int | Decimal | None) -> int | Decimal | None:
    """The gateway's figure minus the provider's (None when the provider did not report it)."""
    if theirs is None:
        return None
    return (ours or 0) - theirs


def report(lines: list[Line]) -> list[str]:
    """The table an operator reads: both sides, the drift, and the missing ones named."""
    out = [
        f"{'day':<10}  {'model':<32}  {'gw prompt':>10} {'prov prompt':>11} {'drift':>8}  "
        f"{'gw compl':>9} {'prov compl':>10} {'drift':>8}  {'gw cost':>11} {'prov cost':>11} {'drift':>11}  note"
    ]
    for line in lines:
        g, p = line.gateway or Totals(), line.provider or Totals()
        note = {"gateway": "missing in the gateway", "provider": "missing in the provider export"}.get(line.missing, "")
        out.append(
            f"{line.day.isoformat():<10}  {shown(line.model)[:32]:<32}  "
            f"{_n(g.prompt):>10} {_n(p.prompt):>11} {_n(drift(g.prompt, p.prompt)):>8}  "
            f"{_n(g.completion):>9} {_n(p.completion):>10} {_n(drift(g.completion, p.completion)):>8}  "
            f"{_usd(g.cost):>11} {_usd(p.cost):>11} {_usd(drift(g.cost, p.cost)):>11}  {note}".rstrip()
        )
    return out


def _n(value: int | Decimal | None) -> str:
    return "-" if value is None else str(value)


def _usd(value: Any) -> str:
    return "-" if value is None else f"{Decimal(value):.6f}"
