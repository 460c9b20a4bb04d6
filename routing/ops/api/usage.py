"""Spend, requests and cache savings over a time range, grouped by org, agent, key or model
(docs/management-api.md#usage).

Read from the usage records, the same rows the analytics page and the budgets count; the savings are
priced as the analytics page prices them (routing.ops.usage.savings).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from routing.config import live
from routing.core import errors
from routing.models import UsageRecord
from routing.ops.api.http import iso, listing, page, parse_time, text_param
from routing.ops.usage import savings

GROUPS = {
    "org": ("org",),
    "agent": ("org", "agent"),
    "key": ("key_prefix", "org", "agent"),
    "model": ("model_used",),
}
FILTERS = {"org": "org", "agent": "agent", "key": "key_prefix", "model": "model_used"}
DEFAULT_RANGE = timedelta(days=1)


def _range(request: HttpRequest) -> tuple[datetime, datetime]:
    until = parse_time(request.GET.get("until"), "until") or datetime.now(UTC)
    since = parse_time(request.GET.get("since"), "since") or until - DEFAULT_RANGE
    if since >= until:
        raise errors.invalid_request("since must be before until.", "since")
    return since, until


def usage(request: HttpRequest, token: Any) -> dict[str, Any]:
    """?group_by=org|agent|key|model&since=&until= (ISO 8601; default the last 24 h), ?org= ?agent= ?key= ?model=
    filters, biggest spend first, paginated."""
    group_by = text_param(request, "group_by") or "org"
    if group_by not in GROUPS:
        raise errors.invalid_request("group_by must be one of org, agent, key, model.", "group_by")
    limit, offset = page(request)
    since, until = _range(request)
    rows = UsageRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    if token.org_id:
        rows = rows.filter(org=token.org.name)
    for param, column in FILTERS.items():
        value = text_param(request, param)
        if value:
            rows = rows.filter(**{column: value})
    columns = GROUPS[group_by]
    grouped = (
        rows.values(*columns)
        .annotate(
            requests=Count("id"),
            errors=Count("id", filter=Q(status__gte=400)),
            prompt_tokens=Coalesce(Sum("prompt_tokens"), 0),
            completion_tokens=Coalesce(Sum("completion_tokens"), 0),
            cost=Sum("cost"),
        )
        .order_by("-cost", "-requests", *columns)
    )
    total = grouped.count()
    shown = list(grouped[offset : offset + limit])
    saved = _saved(rows, columns, shown, until)
    data = []
    for row in shown:
        item = {("key" if c == "key_prefix" else "model" if c == "model_used" else c): row[c] for c in columns}
        item.update(
            requests=row["requests"],
            errors=row["errors"],
            prompt_tokens=row["prompt_tokens"],
            completion_tokens=row["completion_tokens"],
            cost_usd=float(row["cost"] or 0),
            **_saved_fields(saved.get(tuple(row[c] for c in columns))),
        )
        data.append(item)
    return {**listing(data, total, limit, offset), "group_by": group_by, "since": iso(since), "until": iso(until)}


def _saved(rows: Any, columns: tuple[str, ...], shown: list[dict[str, Any]], until: datetime) -> dict[tuple, Any]:
    """The cache savings of the rows on this page (one query over their records that used a cache)."""
    if not shown:
        return {}
    first = columns[0]
    page_rows = rows.filter(**{f"{first}__in": sorted({row[first] for row in shown})})
    return savings.saved_by(page_rows, live.current(), columns, until.timestamp())


def _saved_fields(saved: savings.Saved | None) -> dict[str, Any]:
    one = (saved or savings.Saved()).as_dict()
    return {
        "cached_input_tokens": one["cached_input_tokens"],
        "prompt_cache_saved_usd": one["prompt_cache_usd"],
        "response_cache_hits": one["response_cache_hits"],
        "response_cache_saved_usd": one["response_cache_usd"],
    }
