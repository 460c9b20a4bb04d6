"""The audit log in the admin: read-only, filtered, exported as CSV or JSON lines (docs/audit.md#admin)."""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from routing.models import AuditRecord
from routing.ops.admin_base import ReadOnlyAdmin

COLUMNS = ("at", "actor", "source", "remote_addr", "action", "object_type", "object_id", "object_repr", "org")
COLUMNS += ("fields", "detail")


def _row(record: AuditRecord) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in COLUMNS}
    row["at"] = record.at.isoformat()
    return row


def _csv_cell(value: Any) -> str:
    """A cell no spreadsheet runs as a formula (=, +, -, @ first are quoted with a ')."""
    text = ",".join(value) if isinstance(value, list) else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


class AuditRecordAdmin(ReadOnlyAdmin):
    org_path = "org"  # an org-scoped operator reads its orgs' records (logins and global changes name no org)
    list_display = ["at", "actor", "source", "action", "object_type", "object_repr", "org", "remote_addr"]
    list_filter = ["action", "source", "object_type", "org", "at"]
    search_fields = ["actor", "object_repr", "object_id", "remote_addr", "detail"]
    date_hierarchy = "at"
    actions = ["export_csv", "export_jsonl"]

    @admin.action(description="Export the selected records as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[AuditRecord]) -> HttpResponse:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for record in queryset.order_by("at", "id"):
            row = _row(record)
            writer.writerow([_csv_cell(row[name]) for name in COLUMNS])
        response = HttpResponse(out.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response

    @admin.action(description="Export the selected records as JSON lines", permissions=["view"])
    def export_jsonl(self, request: HttpRequest, queryset: QuerySet[AuditRecord]) -> HttpResponse:
        lines = b"".join(orjson.dumps(_row(r)) + b"\n" for r in queryset.order_by("at", "id"))
        response = HttpResponse(lines, content_type="application/jsonl")
        response["Content-Disposition"] = 'attachment; filename="audit.jsonl"'
        return response
