"""The request log: usage records searched by request id, org, key, model, status... (docs/operations.md#request-log).

`Search.parse` validates the query parameters (a `SearchError` names the bad one);
`find` returns one page of matching records, newest first, paged by keyset
(`before` = the last id seen, so a page costs the same however deep it is);
`trail` explains a record's chain trail link by link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q

from routing.models import UsageRecord
from routing.ops import scope

PAGE_SIZE = 50
MAX_TEXT = 200
# Exact-match filters: query parameter -> UsageRecord field.
EXACT: dict[str, str] = {
    "org": "org",
    "agent": "agent",
    "key": "key_prefix",
    "model": "model_used",
    "requested": "requested_model",  # what the client named (an alias, a model that never served)
    "provider": "provider",
    "error_code": "error_code",
    "fallback_reason": "fallback_reason",
    "endpoint": "endpoint",
}
STATUS_CLASSES = ("2xx", "4xx", "5xx", "error")
SINCE_HOURS = {"1": 1, "24": 24, "168": 168, "720": 720}
_STATUS = re.compile(r"^[1-5][0-9][0-9]$")

# What each trail entry means to an operator (anything else is an error code, shown as is).
TRAIL_MEANING: dict[str, str] = {
    "ok": "served the request",
    "circuit_open": "skipped: its circuit breaker was open",
    "upstream_5xx": "left: the provider answered 5xx",
    "upstream_429": "left: the provider rate-limited the request (429)",
    "connect_timeout": "left: connecting to the provider timed out",
    "connect_error": "left: the provider could not be reached",
    "first_token_timeout": "left: the provider sent nothing in time",
    "empty_stream": "left: the provider's stream ended without content",
    "stream_error": "left: the provider's stream broke",
    "content_filter": "left: the provider's content filter refused the request",
    "total_timeout": "stopped: the request's total timeout ran out",
    "unsupported_capability": "skipped: the model lacks a capability the request needs",
    "context_length": "skipped: the prompt exceeds the model's context window",
    "model_denied": "skipped: the org's policy denies this model",
    "model_not_found": "skipped: no such model",
}


class SearchError(ValueError):
    """A request-log query parameter that cannot be used; the message names it and what it accepts."""


@dataclass(frozen=True, slots=True)
class Search:
    """A validated request-log query."""

    exact: dict[str, str] = field(default_factory=dict)
    request_id: str = ""
    status: str = ""  # "", a 3-digit status, or one of STATUS_CLASSES
    since_hours: int | None = None
    before: int | None = None  # keyset: records with a smaller id

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Search:
        exact = {}
        for param in EXACT:
            value = (params.get(param) or "").strip()
            if len(value) > MAX_TEXT:
                raise SearchError(f"{param} must be at most {MAX_TEXT} characters")
            if value:
                exact[param] = value
        request_id = (params.get("request_id") or "").strip()
        if len(request_id) > 128:
            raise SearchError("request_id must be at most 128 characters (the X-Request-Id of the request)")
        status = (params.get("status") or "").strip().lower()
        if status and status not in STATUS_CLASSES and not _STATUS.match(status):
            raise SearchError(f"status must be a 3-digit HTTP status or one of {', '.join(STATUS_CLASSES)}")
        since = (params.get("since") or "").strip()
        if since and since not in SINCE_HOURS:
            raise SearchError(f"since must be one of {', '.join(SINCE_HOURS)} (hours)")
        before = (params.get("before") or "").strip()
        if before and not before.isdigit():
            raise SearchError("before must be a record number (from the previous page's link)")
        return cls(exact, request_id, status, SINCE_HOURS[since] if since else None, int(before) if before else None)

    def query_string(self, **changes: Any) -> str:
        from urllib.parse import urlencode

        params: dict[str, Any] = {
            **self.exact,
            "request_id": self.request_id,
            "status": self.status,
            "since": self.since_hours or "",
            "before": self.before or "",
            **changes,
        }
        return urlencode({k: v for k, v in params.items() if v not in ("", None)})

    def condition(self, now: datetime | None = None) -> Q:
        q = Q(**{EXACT[p]: v for p, v in self.exact.items()})
        if self.request_id:
            q &= Q(request_id=self.request_id)
        if self.status == "2xx":
            q &= Q(status__gte=200, status__lt=300)
        elif self.status == "4xx":
            q &= Q(status__gte=400, status__lt=500)
        elif self.status == "5xx":
            q &= Q(status__gte=500)
        elif self.status == "error":
            q &= Q(status__gte=400)
        elif self.status:
            q &= Q(status=int(self.status))
        if self.since_hours:
            q &= Q(created_at__gte=(now or datetime.now(tz=UTC)) - timedelta(hours=self.since_hours))
        if self.before:
            q &= Q(id__lt=self.before)
        return q


@dataclass(frozen=True, slots=True)
class Page:
    records: list[Any]
    next_before: int | None  # `before` of the next (older) page; None on the last page


def find(search: Search, size: int = PAGE_SIZE, orgs: frozenset[str] | None = None) -> Page:
    """One page of matching records of `orgs` (the viewer's: routing.ops.scope.visible_orgs; None: every org),
    newest first (one query, size + 1 rows to know if more follow)."""

    rows = list(
        _of_orgs(orgs).filter(search.condition()).defer("request_body", "response_body").order_by("-id")[: size + 1]
    )
    more = len(rows) > size
    rows = rows[:size]
    return Page(rows, rows[-1].id if more and rows else None)


def get(record_id: str, orgs: frozenset[str] | None = None) -> Any | None:
    """A record of `orgs` by its record id (the request log's links) or, failing that, by its request id
    (newest)."""

    record_id = record_id.strip()[:128]
    found = _of_orgs(orgs).filter(record_id=record_id).first()
    return found or _of_orgs(orgs).filter(request_id=record_id).order_by("-id").first()


def _of_orgs(orgs: frozenset[str] | None) -> Any:
    return scope.within(UsageRecord.objects.all(), "org", orgs)


@dataclass(frozen=True, slots=True)
class Hop:
    position: int
    model: str
    provider: str
    outcome: str
    meaning: str
    served: bool


def trail(record: Any, snapshot: Any) -> list[Hop]:
    """The record's chain trail, one hop per link considered, with each link's provider (from the snapshot)."""
    hops = []
    for i, entry in enumerate(record.trail or [], start=1):
        if not isinstance(entry, list | tuple) or len(entry) < 2:
            continue
        model, outcome = str(entry[0]), str(entry[1])
        spec = snapshot.models.get(model)
        provider = spec.provider.name if spec is not None else ""
        meaning = TRAIL_MEANING.get(outcome, f"failed: {outcome}")
        hops.append(Hop(i, model, provider, outcome, meaning, outcome == "ok"))
    return hops
