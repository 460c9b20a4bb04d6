"""Dashboard pages: the live circuit/provider screen and a usage summary (staff only).

Anonymous visitors are sent to the admin login; signed-in non-staff users get 403.
The live page renders this process's state into the HTML (first paint without
waiting for the socket); everything after that arrives over /ws/dashboard/.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db.models import Count, Q, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from routing.models import UsageRecord
from routing.ops import controls, scope
from routing.ops.dashboard import state
from routing.runtime.cluster import process_list
from routing.runtime.observe import feed
from routing.runtime.process import current


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not (user.is_active and user.is_staff):
            return HttpResponseForbidden("The dashboard is for staff users; ask an administrator for staff status.")
        return view(request, *args, **kwargs)

    return wrapper


@staff_only
def index(request: HttpRequest) -> HttpResponse:
    feed.install(current().breakers)
    return render(
        request,
        "dashboard/index.html",
        {
            "initial_state": state.scoped_state(feed.call_on_loop(state.build_state), scope.visible_orgs(request.user)),
            "refresh_s": state.refresh_s(),
            "title": "Switchboard dashboard",
            "can_control": controls.may_control(request.user),  # else the buttons are disabled
        },
    )


USAGE_WINDOWS = {"1": 1, "24": 24, "168": 168, "720": 720}


@staff_only
def usage_summary(request: HttpRequest) -> HttpResponse:
    """Per model over a time window: requests, errors, fallbacks, tokens, cost; the share of prompt tokens the
    providers read from their prompt cache, and the served requests nobody could price (docs/metrics.md#spend)."""

    hours = USAGE_WINDOWS.get(request.GET.get("hours", "24"), 24)
    since = timezone.now() - timedelta(hours=hours)
    records = scope.within(UsageRecord.objects.all(), "org", scope.visible_orgs(request.user))
    rows = (
        records.filter(created_at__gte=since)
        .values("model_used")
        .annotate(
            # first: below, "cost" names the sum; here still the record's own column
            unpriced=Count("id", filter=Q(status=200, cached=False) & (Q(cost__isnull=True) | Q(cost=0))),
            requests=Count("id"),
            errors=Count("id", filter=Q(status__gte=500)),
            fallbacks=Count("id", filter=~Q(fallback_reason="")),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            cost=Sum("cost"),
            cached_tokens=Sum("cache_read_tokens"),
        )
        .order_by("-requests", "model_used")
    )
    totals = {
        "requests": 0,
        "errors": 0,
        "fallbacks": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost": 0,
        "cached_tokens": 0,
        "unpriced": 0,
    }
    rows = list(rows)
    for row in rows:
        for field in totals:
            totals[field] += row[field] or 0
        row["cached_pct"] = _pct(row["cached_tokens"], row["prompt_tokens"])
    totals["cached_pct"] = _pct(totals["cached_tokens"], totals["prompt_tokens"])
    return render(
        request,
        "dashboard/usage.html",
        {
            "rows": rows,
            "totals": totals,
            "hours": hours,
            "windows": [1, 24, 168, 720],
            "backlog": current().usage.backlog(),
            "title": "Usage",
        },
    )


def _pct(part: int | None, whole: int | None) -> str:
    """A share as "42 %", or "–" when there is nothing to divide."""
    return f"{100 * (part or 0) / whole:.0f} %" if whole else "–"


@staff_only
def processes_view(request: HttpRequest) -> JsonResponse:
    """GET /dashboard/processes/: the process list as JSON (staff only, like the dashboard)."""
    return JsonResponse(process_list.listing())
