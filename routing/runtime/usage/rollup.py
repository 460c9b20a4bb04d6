"""Hourly usage aggregates, kept by the usage writer, so long analytics ranges stay fast (docs/operations.md#analytics).

The writer adds each batch's new rows to routing.UsageRollup in the insert's
transaction: per hour, one row per GROUPINGS entry (totals; per org; per key with
its org and agent; per model with its provider; per full combination), each with
counts, tokens, spend and a latency histogram (LATENCY_BOUNDS_MS). A query picks the
smallest grouping that holds its filters and the dimension it groups by (`grouping_for`),
so "last 30 days, all traffic" reads 720 rows instead of every request.

`rebuild` recomputes the aggregates from the usage records (after an upgrade, or
rows inserted behind the writer's back): `manage.py usage_rollup`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

Row = dict[str, Any]

DIMENSIONS = ("org", "agent", "key_prefix", "model_used", "provider")
# name -> the dimensions its rows keep (the others are stored empty)
GROUPINGS: dict[str, tuple[str, ...]] = {
    "all": (),
    "org": ("org",),
    "key": ("key_prefix", "org", "agent"),
    "model": ("model_used", "provider"),
    "full": DIMENSIONS,
}
# Latency histogram: bucket i holds latencies below LATENCY_BOUNDS_MS[i] (and at or above the
# previous bound); the last bucket everything from 131 s. Bounds grow by sqrt(2) from 0.25 ms, so
# a gateway answering in about a millisecond (a cache hit, the mock) reads as that, not as the
# 13.5 ms a first bound of 16 ms made of it (migration 0011 moved the old counts up 12 buckets).
LATENCY_BOUNDS_MS: tuple[float, ...] = tuple(0.25 * math.sqrt(2) ** k for k in range(39))
LATENCY_BUCKETS = len(LATENCY_BOUNDS_MS) + 1
LAT_FIELDS = tuple(f"lat_{i:02d}" for i in range(LATENCY_BUCKETS))
COUNTERS = ("requests", "errors", "client_errors", "fallbacks", "prompt_tokens", "completion_tokens", "cost")


def series_aggregates() -> dict[str, Any]:
    """The sums behind every analytics series, as ORM aggregates: one definition for the hourly
    rollup and for the last hour read from the records (docs/operations.md#analytics)."""
    from django.db.models import Count, Q, Sum

    return {
        "requests": Count("id"),
        "errors": Count("id", filter=Q(status__gte=500)),
        "client_errors": Count("id", filter=Q(status__gte=400, status__lt=500)),
        "fallbacks": Count("id", filter=~Q(fallback_reason="")),
        "prompt_tokens": Sum("prompt_tokens"),
        "completion_tokens": Sum("completion_tokens"),
        "cost": Sum("cost"),
    }


def grouping_for(columns: Iterable[str]) -> str:
    """The smallest grouping whose rows keep every one of `columns`."""
    needed = set(columns)
    for name, dims in GROUPINGS.items():
        if needed <= set(dims):
            return name
    return "full"


def latency_bucket(ms: float) -> int:
    """The bucket of `ms`: how many bounds are at or below it (the same comparisons as `rebuild`'s
    filters and PostgreSQL's width_bucket in the one-statement batch, so all three agree at a bound)."""
    return bisect_right(LATENCY_BOUNDS_MS, ms)


def hist_percentile(hist: Sequence[int], p: float) -> float | None:
    """The p-quantile of a latency histogram, like `percentile_cont` would give on the raw values.

    The value at 0-based position p * (n - 1), each bucket's values taken as spread evenly
    (geometrically) across it: within one bucket (a factor sqrt 2) of the exact answer; the
    first bucket (below 0.25 ms) linearly from 0.
    """
    total = sum(hist)
    if total <= 0:
        return None
    pos = p * (total - 1)
    seen = 0
    for i, n in enumerate(hist):
        if n and pos < seen + n:
            frac = min(1.0, (pos - seen + 0.5) / n)
            if i == 0:
                return LATENCY_BOUNDS_MS[0] * frac
            lo = LATENCY_BOUNDS_MS[i - 1]
            hi = LATENCY_BOUNDS_MS[i] if i < len(LATENCY_BOUNDS_MS) else lo * math.sqrt(2)
            return lo * (hi / lo) ** frac
        seen += n
    return LATENCY_BOUNDS_MS[-1]


def _hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def aggregate(rows, to_datetime):
    """Per (grouping, hour, dimensions...): the counters then the histogram, as a list of numbers.

    Rows are summed per full combination first (one dict lookup a row), then the coarser
    groupings from those sums: a batch has far fewer combinations than rows.
    """
    ncount = len(COUNTERS)
    width = ncount + LATENCY_BUCKETS
    hours: dict[int, datetime] = {}
    full: dict[tuple, list[Any]] = {}
    for r in rows:
        at = r.get("created_at")
        if isinstance(at, int | float):
            slot = int(at // 3600)
            hour = hours.get(slot)
            if hour is None:
                hour = hours[slot] = datetime.fromtimestamp(slot * 3600, tz=UTC)
        else:
            hour = _hour(to_datetime(at))
        key = (
            hour,
            str(r.get("org") or "")[:64],
            str(r.get("agent") or "")[:64],
            str(r.get("key_prefix") or "")[:16],
            str(r.get("model_used") or "")[:200],
            str(r.get("provider") or "")[:64],
        )
        acc = full.get(key)
        if acc is None:
            acc = full[key] = [0] * width
            acc[6] = Decimal(0)
        acc[0] += 1
        status = int(r.get("status") or 0)
        if status >= 500:
            acc[1] += 1
        elif status >= 400:
            acc[2] += 1
        if r.get("fallback_reason"):
            acc[3] += 1
        acc[4] += int(r.get("prompt_tokens") or 0)
        acc[5] += int(r.get("completion_tokens") or 0)
        cost = r.get("cost")
        if cost is not None:
            acc[6] += Decimal(str(cost))
        acc[ncount + latency_bucket(float(r.get("latency_ms") or 0.0))] += 1
    out: dict[tuple, list[Any]] = {}
    for (hour, org, agent, key_prefix, model_used, provider), acc in full.items():
        for gkey in (
            ("all", hour, "", "", "", "", ""),
            ("org", hour, org, "", "", "", ""),
            ("key", hour, org, agent, key_prefix, "", ""),
            ("model", hour, "", "", "", model_used, provider),
            ("full", hour, org, agent, key_prefix, model_used, provider),
        ):
            into = out.get(gkey)
            if into is None:
                out[gkey] = list(acc)
            else:
                for i in range(width):
                    into[i] += acc[i]
    return out


def add(cursor: Any, connection: Any, rows: Sequence[Row], to_datetime: Callable[[Any], datetime]) -> None:
    """Upsert the batch's aggregates (one statement per grouping/hour/combination in the batch)."""
    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRollup

    per = aggregate(rows, to_datetime)
    if not per:
        return
    ops = connection.ops
    q = ops.quote_name
    table = q(UsageRollup._meta.db_table)
    keys = ("grouping", "bucket", *DIMENSIONS)
    numbers = (*COUNTERS, *LAT_FIELDS)
    columns = ", ".join(q(c) for c in (*keys, *numbers))
    updates = ", ".join(f"{q(c)} = {table}.{q(c)} + excluded.{q(c)}" for c in numbers)
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * (len(keys) + len(numbers)))}) "
        f"ON CONFLICT ({', '.join(q(c) for c in keys)}) DO UPDATE SET {updates}"
    )
    params = []
    for (name, hour, *dims), acc in per.items():
        acc = list(acc)
        acc[6] = ops.adapt_decimalfield_value(acc[6].quantize(Decimal("0.00000001")), 20, 8)
        params.append((name, ops.adapt_datetimefield_value(hour), *dims, *acc))
    cursor.executemany(sql, params)


def rebuild(since: datetime | None = None) -> int:
    """Recompute the aggregates from the usage records (from `since`'s hour; default all); returns rows written.

    One GROUP BY query per grouping, in the database; the replaced hours are deleted
    and written in one transaction.
    """
    from django.db import transaction
    from django.db.models import Count, Q
    from django.db.models.functions import Trunc

    # reason: process supervisors read the usage package outside Django (spool pids); models load when a batch is written
    from routing.models import UsageRecord, UsageRollup

    start = _hour(since.astimezone(UTC)) if since is not None else None
    records = UsageRecord.objects.order_by()
    rollups = UsageRollup.objects.all()
    if start is not None:
        records = records.filter(created_at__gte=start)
        rollups = rollups.filter(bucket__gte=start)
    bounds = (0.0, *LATENCY_BOUNDS_MS)
    lat = {
        field: Count(
            "id",
            filter=Q(latency_ms__gte=bounds[i]) & (Q(latency_ms__lt=bounds[i + 1]) if i + 1 < len(bounds) else Q()),
        )
        for i, field in enumerate(LAT_FIELDS)
    }
    lat[LAT_FIELDS[0]] = Count("id", filter=Q(latency_ms__lt=LATENCY_BOUNDS_MS[0]))
    written = 0
    with transaction.atomic():
        rollups.delete()
        for name, dims in GROUPINGS.items():
            grouped = (
                records.annotate(hour=Trunc("created_at", "hour", tzinfo=UTC))
                .values("hour", *dims)
                .annotate(
                    **series_aggregates(),
                    **lat,
                )
            )
            objs = [
                UsageRollup(
                    grouping=name,
                    bucket=row["hour"],
                    **{d: row.get(d, "") if d in dims else "" for d in DIMENSIONS},
                    **{c: row[c] or 0 for c in (*COUNTERS, *LAT_FIELDS)},
                )
                for row in grouped.iterator(2000)
            ]
            UsageRollup.objects.bulk_create(objs, batch_size=1000)
            written += len(objs)
    return written
