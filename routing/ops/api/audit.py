"""The audit log over HTTP: GET /api/v1/audit, newest first, filtered and paginated (docs/audit.md#api).

Only a token that is not limited to an org reads it: the log names every org's operators.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

from routing.core import errors
from routing.models import AuditRecord
from routing.ops.api.http import iso, listing, page, parse_time, text_param

FIELDS = (
    "actor",
    "source",
    "remote_addr",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "org",
    "fields",
    "detail",
)
EXACT = ("actor", "source", "action", "object_type", "org")


def _filtered(request: HttpRequest) -> QuerySet[AuditRecord]:
    """Records narrowed by ?actor= ?source= ?action= ?object_type= ?org= ?since= ?until=."""
    rows = AuditRecord.objects.all()
    for name in EXACT:
        value = text_param(request, name)
        if value:
            rows = rows.filter(**{name: value})
    since = parse_time(request.GET.get("since"), "since")
    until = parse_time(request.GET.get("until"), "until")
    if since and until and since >= until:
        raise errors.invalid_request("since must be before until.", "since")
    if since:
        rows = rows.filter(at__gte=since)
    if until:
        rows = rows.filter(at__lt=until)
    return rows


def list_audit(request: HttpRequest, token: Any) -> dict[str, Any]:
    """A page of audit records; 403 for a token limited to one org."""
    if token.org_id:
        raise errors.permission_denied(
            f"The token '{token.name}' is limited to one org; the audit log needs a token for every org."
        )
    limit, offset = page(request)
    rows = _filtered(request).order_by("-at", "-id")
    total = rows.count()
    data = []
    for row in rows.values("id", "at", *FIELDS)[offset : offset + limit]:
        data.append({"id": row["id"], "at": iso(row["at"]), **{name: row[name] for name in FIELDS}})
    return listing(data, total, limit, offset)
