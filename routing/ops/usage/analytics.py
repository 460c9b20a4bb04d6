"""Usage analytics: the usage records aggregated over time, in the database (docs/operations.md#analytics).

Read by the analytics page only, never by the request path. Each chart is one
aggregate query over an indexed time range: `series` (requests, errors, fallbacks,
tokens, spend per bucket), `latency` (p50/p95 per bucket) and `top` (the biggest
keys, models or orgs by spend). The last hour (minute buckets) reads the usage
records themselves (p50/p95 exact: `percentile_cont` on PostgreSQL, computed here on
SQLite, which has no percentile aggregate); longer ranges read the hourly aggregates
the usage writer keeps (routing.runtime.usage.rollup), so a month costs 720 rows per
grouping rather than every request. `saved` (what the prompt caches and the response
cache saved, routing.ops.usage.savings) reads the records that used a cache for every
range: the aggregates keep no cache columns.
`View.parse` turns query parameters into a validated view or a `ViewError` that
says which parameter is wrong and what it accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import connections
from django.db.models import Aggregate, Count, F, FloatField, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc

from routing.config import live
from routing.config.snapshot import Snapshot
from routing.models import UsageRecord, UsageRollup
from routing.ops import scope
from routing.ops.usage import savings
from routing.runtime.usage import rollup


@dataclass(frozen=True, slots=True)
class Range:
    """A selectable time range: its span and the width of one bucket."""

    name: str
    label: str
    span_s: int
    unit: str  # Trunc kind
    step_s: int

    @property
    def buckets(self) -> int:
        return self.span_s // self.step_s


RANGES: dict[str, Range] = {
    r.name: r
    for r in (
        Range("hour", "last hour, by minute", 3600, "minute", 60),
        Range("day", "last day, by hour", 86400, "hour", 3600),
        Range("week", "last week, by hour", 7 * 86400, "hour", 3600),
        Range("month", "last 30 days, by day", 30 * 86400, "day", 86400),
    )
}
DEFAULT_RANGE = "day"

# Query parameter -> UsageRecord field; an exact match each (values are ids, not free text).
FILTERS: dict[str, str] = {
    "org": "org",
    "agent": "agent",
    "key": "key_prefix",
    "model": "model_used",
    "requested": "requested_model",  # the model or alias the client named, even one that never served
    "provider": "provider",
}
# Filters the hourly aggregates do not keep: a view with one reads the usage records for every range.
RECORDS_ONLY = frozenset({"requested"})
MAX_FILTER_LEN = 200
TOP_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "models": ("model_used", "provider"),
    "keys": ("key_prefix", "org", "agent"),
    "orgs": ("org",),
}
TOP_N = 10


class ViewError(ValueError):
    """A query parameter the analytics page cannot use; the message names it and what it accepts."""


@dataclass(frozen=True, slots=True)
class View:
    """What the operator asked to see: a range ending now and exact-match filters."""

    range: Range
    filters: dict[str, str] = field(default_factory=dict)
    now: float = 0.0  # epoch s
    orgs: frozenset[str] | None = None  # the viewer's orgs (routing.ops.scope.visible_orgs); None: every org

    @classmethod
    def parse(cls, params: Mapping[str, str], now: float, orgs: frozenset[str] | None = None) -> View:
        name = (params.get("range") or DEFAULT_RANGE).strip()
        if name not in RANGES:
            raise ViewError(f"range must be one of {', '.join(RANGES)}, got {name[:40]!r}")
        filters = {}
        for param in FILTERS:
            value = (params.get(param) or "").strip()
            if len(value) > MAX_FILTER_LEN:
                raise ViewError(f"{param} must be at most {MAX_FILTER_LEN} characters")
            if value:
                filters[param] = value
        return cls(RANGES[name], filters, now, orgs)

    @property
    def first_bucket(self) -> int:
        """Epoch s of the oldest bucket; the newest one holds `now`."""
        step = self.range.step_s
        return (int(self.now) // step) * step - (self.range.buckets - 1) * step

    @property
    def bucket_starts(self) -> list[int]:
        first, step = self.first_bucket, self.range.step_s
        return [first + i * step for i in range(self.range.buckets)]

    def records(self) -> QuerySet[Any]:
        """The usage records of this view (time range and filters); indexed on (filter column, created_at)."""

        since = datetime.fromtimestamp(self.first_bucket, tz=UTC)
        qs = UsageRecord.objects.filter(created_at__gte=since)
        for param, value in self.filters.items():
            qs = qs.filter(**{FILTERS[param]: value})
        return self._within_orgs(qs).order_by()

    def _within_orgs(self, qs: QuerySet[Any]) -> QuerySet[Any]:
        return scope.within(qs, "org", self.orgs)

    @property
    def uses_rollup(self) -> bool:
        """Hourly or coarser buckets come from the hourly aggregates; minute buckets, and a filter the
        aggregates do not keep (the requested model), from the records."""
        return self.range.step_s >= 3600 and not RECORDS_ONLY.intersection(self.filters)

    def rollups(self, *group_by: str) -> QuerySet[Any]:
        """The aggregate rows of this view: the smallest grouping holding its filters and `group_by`."""

        columns = [FILTERS[p] for p in self.filters] + list(group_by)
        if self.orgs is not None:  # an org-scoped viewer: rows that keep the org, to keep only its orgs'
            columns.append("org")
        since = datetime.fromtimestamp(self.first_bucket, tz=UTC)
        qs = UsageRollup.objects.filter(grouping=rollup.grouping_for(columns), bucket__gte=since)
        for param, value in self.filters.items():
            qs = qs.filter(**{FILTERS[param]: value})
        return self._within_orgs(qs).order_by()

    def query_string(self, **changes: str) -> str:
        """This view's parameters (with changes), for links and the CSV export."""
        from urllib.parse import urlencode

        params = {"range": self.range.name, **self.filters, **changes}
        return urlencode({k: v for k, v in params.items() if v})


def _epoch(value: Any) -> int:
    if isinstance(value, datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())
    if isinstance(value, str):  # SQLite may hand back text
        return _epoch(datetime.fromisoformat(value))
    raise TypeError(f"unexpected bucket value {value!r}")


def _num(value: Any) -> float:
    if value is None:
        return 0.0
    return float(value) if isinstance(value, Decimal) else value


SERIES_FIELDS = ("requests", "errors", "client_errors", "fallbacks", "prompt_tokens", "completion_tokens", "cost")


def series(view: View) -> dict[str, list[float]]:
    """Per bucket: requests, 5xx errors, 4xx, fallbacks, tokens and spend (one GROUP BY query)."""
    if view.uses_rollup:
        rows = (
            view.rollups()
            .annotate(b=Trunc("bucket", view.range.unit, tzinfo=UTC))
            .values("b")
            .annotate(**{f"s_{name}": Sum(name) for name in SERIES_FIELDS})
            .order_by("b")
        )
        return _fill(view, ({"bucket": r["b"], **{n: r[f"s_{n}"] for n in SERIES_FIELDS}} for r in rows))
    rows = (
        view.records()
        .annotate(bucket=Trunc("created_at", view.range.unit, tzinfo=UTC))
        .values("bucket")
        .annotate(
            **rollup.series_aggregates(),
        )
        .order_by("bucket")
    )
    return _fill(view, rows)


def _fill(view: View, rows: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Series with a zero for every bucket without rows."""
    starts = view.bucket_starts
    index = {t: i for i, t in enumerate(starts)}
    out: dict[str, list[float]] = {name: [0] * len(starts) for name in SERIES_FIELDS}
    for row in rows:
        i = index.get(_epoch(row["bucket"]))
        if i is None:
            continue
        for name in SERIES_FIELDS:
            out[name][i] = _num(row[name])
    out["cost"] = [round(c, 8) for c in out["cost"]]
    return out


class Percentile(Aggregate):
    """PostgreSQL's `percentile_cont(p) WITHIN GROUP (ORDER BY expr)`."""

    function = "percentile_cont"
    template = "%(function)s(%(p)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, p: float, **extra: Any) -> None:
        super().__init__(expression, p=float(p), **extra)


def percentile(sorted_values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks: what `percentile_cont` returns."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * p
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency(view: View) -> dict[str, list[float | None]]:
    """Per bucket: p50 and p95 of latency_ms (None where a bucket has no request).

    Minute buckets: exact, from the records. Hourly and coarser: from the aggregates'
    latency histograms (within one bucket: they grow by sqrt(2) from 0.25 ms).
    """
    starts = view.bucket_starts
    index = {t: i for i, t in enumerate(starts)}
    p50: list[float | None] = [None] * len(starts)
    p95: list[float | None] = [None] * len(starts)
    if view.uses_rollup:
        rows = (
            view.rollups()
            .annotate(b=Trunc("bucket", view.range.unit, tzinfo=UTC))
            .values("b")
            .annotate(**{f"s_{f}": Sum(f) for f in rollup.LAT_FIELDS})
            .order_by("b")
        )
        for row in rows:
            i = index.get(_epoch(row["b"]))
            if i is not None:
                hist = [int(row[f"s_{f}"] or 0) for f in rollup.LAT_FIELDS]
                p50[i], p95[i] = _round(rollup.hist_percentile(hist, 0.5)), _round(rollup.hist_percentile(hist, 0.95))
        return {"p50": p50, "p95": p95}
    qs = view.records().annotate(bucket=Trunc("created_at", view.range.unit, tzinfo=UTC))
    if connections[qs.db].vendor == "postgresql":
        rows = (
            qs.values("bucket")
            .annotate(p50=Percentile(F("latency_ms"), 0.5), p95=Percentile(F("latency_ms"), 0.95))
            .order_by("bucket")
        )
        for row in rows:
            i = index.get(_epoch(row["bucket"]))
            if i is not None:
                p50[i], p95[i] = _round(row["p50"]), _round(row["p95"])
        return {"p50": p50, "p95": p95}
    per: dict[int, list[float]] = {}
    for bucket, value in qs.values_list("bucket", "latency_ms").order_by("bucket", "latency_ms").iterator(2000):
        i = index.get(_epoch(bucket))
        if i is not None:
            per.setdefault(i, []).append(value)
    for i, values in per.items():
        p50[i], p95[i] = _round(percentile(values, 0.5)), _round(percentile(values, 0.95))
    return {"p50": p50, "p95": p95}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def top(view: View, dimension: str, n: int = TOP_N) -> list[dict[str, Any]]:
    """The `n` biggest groups of `dimension` ("models", "keys", "orgs") by spend, then requests."""
    group = TOP_DIMENSIONS[dimension]
    if view.uses_rollup:
        rows = (
            view.rollups(*group)
            .values(*group)
            .annotate(
                s_requests=Sum("requests"),
                s_errors=Sum("errors"),
                s_tokens=Sum("prompt_tokens") + Sum("completion_tokens"),
                s_cost=Sum("cost"),
            )
            .order_by(F("s_cost").desc(nulls_last=True), "-s_requests", *group)[:n]
        )
        return [
            {
                **{d: row[d] for d in group},
                "requests": row["s_requests"],
                "errors": row["s_errors"],
                "tokens": row["s_tokens"] or 0,
                "cost": _num(row["s_cost"]),
            }
            for row in rows
        ]
    rows = (
        view.records()
        .values(*group)
        .annotate(
            requests=Count("id"),
            errors=Count("id", filter=Q(status__gte=500)),
            # an embedding has no completion count (NULL): it adds 0, not NULL, to the sum
            tokens=Sum(Coalesce("prompt_tokens", 0) + Coalesce("completion_tokens", 0)),
            cost=Sum("cost"),
        )
        .order_by(F("cost").desc(nulls_last=True), "-requests", *group)[:n]
    )
    return [{**row, "cost": _num(row["cost"]), "tokens": row["tokens"] or 0} for row in rows]


def totals(data: Mapping[str, list[float]]) -> dict[str, float]:
    """The view's totals, from its series (no extra query), with error and fallback rates."""
    out = {name: sum(data[name]) for name in SERIES_FIELDS}
    requests = out["requests"]
    out["error_rate"] = out["errors"] / requests if requests else 0.0
    out["fallback_rate"] = out["fallbacks"] / requests if requests else 0.0
    out["cost"] = round(out["cost"], 8)
    return out


def saved(view: View, snapshot: Snapshot) -> dict[str, Any]:
    """What the prompt caches and the response cache saved over the view, in total, per model and per org.

    Read from the records that used a cache (the hourly aggregates keep no cache columns), priced at read
    time (routing.ops.usage.savings); the view's filters and the viewer's orgs apply as to every chart."""
    groups = savings.saved_by(view.records(), snapshot, ("org", "model_used"), view.now)
    total, per_model, per_org = savings.Saved(), {}, {}
    for (org, model), one in groups.items():
        total.add(one)
        per_model.setdefault(model, savings.Saved()).add(one)
        per_org.setdefault(org, savings.Saved()).add(one)
    return {
        "totals": total.as_dict(),
        "models": _saved_rows("model_used", per_model),
        "orgs": _saved_rows("org", per_org),
    }


def _saved_rows(column: str, groups: Mapping[str, savings.Saved]) -> list[dict[str, Any]]:
    """One row per group, the biggest saving first."""
    ordered = sorted(groups.items(), key=lambda item: (-item[1].total_usd, item[0]))
    return [{column: name, **one.as_dict()} for name, one in ordered]


def build(view: View, snapshot: Snapshot | None = None) -> dict[str, Any]:
    """Everything the page draws: buckets, series, latency, totals, the top tables and the savings
    (priced with `snapshot`, the live configuration by default)."""
    data = series(view)
    return {
        "range": view.range.name,
        "step_s": view.range.step_s,
        "buckets": view.bucket_starts,
        **data,
        **latency(view),
        "totals": totals(data),
        "top": {dim: top(view, dim) for dim in TOP_DIMENSIONS},
        "savings": saved(view, live.current() if snapshot is None else snapshot),
    }


CSV_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any], int], Any]], ...] = (
    ("bucket_start_utc", lambda d, i: datetime.fromtimestamp(d["buckets"][i], tz=UTC).isoformat()),
    *((name, (lambda d, i, name=name: d[name][i])) for name in SERIES_FIELDS),
    ("p50_latency_ms", lambda d, i: d["p50"][i]),
    ("p95_latency_ms", lambda d, i: d["p95"][i]),
)


def csv_rows(data: Mapping[str, Any]) -> list[list[Any]]:
    """The current view as CSV rows (header first), one per bucket."""
    rows: list[list[Any]] = [[name for name, _ in CSV_COLUMNS]]
    for i in range(len(data["buckets"])):
        rows.append(["" if (v := get(data, i)) is None else v for _, get in CSV_COLUMNS])  # type: ignore[arg-type]
    return rows
