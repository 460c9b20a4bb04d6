"""The request log over HTTP: usage records, newest first, filtered and paginated (docs/management-api.md#requests).

The same rows the dashboard's request log shows. Bodies only for a token with `bodies`
(routing.runtime.observe.bodies.token_reads_bodies); for any other token the fields are absent.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

from routing.core import errors
from routing.models import UsageRecord
from routing.ops.api.http import iso, listing, page, parse_time, text_param
from routing.runtime.observe.bodies import FIELDS as BODY_FIELDS
from routing.runtime.observe.bodies import token_reads_bodies

# column -> API field, in the order a row is shown
COLUMNS = (
    ("request_id", "request_id"),
    ("org", "org"),
    ("agent", "agent"),
    ("key_prefix", "key"),
    ("endpoint", "endpoint"),
    ("requested_model", "model"),
    ("model_used", "model_used"),
    ("provider", "provider"),
    ("status", "status"),
    ("error_code", "error_code"),
    ("fallback_reason", "fallback_reason"),
    ("attempts", "attempts"),
    ("prompt_tokens", "prompt_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("latency_ms", "latency_ms"),
    ("ttft_ms", "ttft_ms"),
    ("streamed", "streamed"),
    ("cached", "cached"),
)
EXACT = {"org": "org", "agent": "agent", "model": "model_used"}


def _filtered(request: HttpRequest, token: Any) -> QuerySet[UsageRecord]:
    """The token's rows narrowed by ?org= ?agent= ?key= (prefix) ?model= ?status= ?since= ?until=."""
    rows = UsageRecord.objects.all()
    if token.org_id:
        rows = rows.filter(org=token.org.name)
    for param, column in EXACT.items():
        value = text_param(request, param)
        if value:
            rows = rows.filter(**{column: value})
    key = text_param(request, "key")
    if key:
        rows = rows.filter(key_prefix__startswith=key)
    status = text_param(request, "status")
    if status:
        if not (status.isascii() and status.isdigit() and 100 <= int(status) <= 599):
            raise errors.invalid_request(
                f"status must be an HTTP status from 100 to 599, got {status[:20]!r}.", "status"
            )
        rows = rows.filter(status=int(status))
    since = parse_time(request.GET.get("since"), "since")
    until = parse_time(request.GET.get("until"), "until")
    if since and until and since >= until:
        raise errors.invalid_request("since must be before until.", "since")
    if since:
        rows = rows.filter(created_at__gte=since)
    if until:
        rows = rows.filter(created_at__lt=until)
    return rows


def list_requests(request: HttpRequest, token: Any) -> dict[str, Any]:
    """A page of usage records, newest first; `request_body`/`response_body` only for a bodies token."""
    limit, offset = page(request)
    rows = _filtered(request, token).order_by("-created_at", "-id")
    bodies = token_reads_bodies(token)
    fields = ["id", "created_at", "cost", *(c for c, _ in COLUMNS), *(BODY_FIELDS if bodies else ())]
    total = rows.count()
    data = []
    for row in rows.values(*fields)[offset : offset + limit]:
        item: dict[str, Any] = {"id": row["id"], "created_at": iso(row["created_at"])}
        item.update({name: row[column] for column, name in COLUMNS})
        item["cost_usd"] = None if row["cost"] is None else float(row["cost"])
        if bodies:
            item.update({name: row[name] for name in BODY_FIELDS})
        data.append(item)
    return listing(data, total, limit, offset)
