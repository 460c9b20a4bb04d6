"""The operators' usage pages: analytics (charts over time) and the request log (docs/operations.md).

Both read usage records from the database (never the request path) and need
staff status plus the named permission VIEW_USAGE (the "Operators" group has it);
the request and response bodies an org opted into storing need a superuser.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import render

from routing.config import live
from routing.ops import scope
from routing.ops.usage import analytics, browse
from routing.runtime.observe import bodies

VIEW_USAGE = "routing.view_usagerecord"
UPLOT_DIR = "vendor/uplot-1.6.32"  # routing/static/vendor/uplot-1.6.32/VENDORED.md


def may_view_usage(user: Any) -> bool:
    """Active staff holding VIEW_USAGE (superusers hold every permission)."""
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(VIEW_USAGE))


def usage_viewers_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous: to the login page. Signed in without the permission: 403 saying which one."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not may_view_usage(user):
            return HttpResponseForbidden(
                f"Usage pages need staff status and the {VIEW_USAGE} permission (the Operators group has it);"
                " ask an administrator."
            )
        return view(request, *args, **kwargs)

    return wrapper


def _bad_request(request: HttpRequest, title: str, message: str) -> HttpResponse:
    return render(request, "dashboard/bad_request.html", {"title": title, "message": message}, status=400)


def _choices(orgs: frozenset[str] | None) -> dict[str, list[str]]:
    """Filter choices from the live snapshot (memory, no query): of the orgs, the viewer's."""
    snap = live.current()
    return {
        "orgs": sorted(o for o in snap.orgs if scope.org_visible(orgs, o)),
        "models": sorted(snap.models),
        "requested": sorted({*snap.models, *snap.aliases}),  # suggestions only: any name may be typed
        "providers": sorted(snap.providers),
    }


@usage_viewers_only
def analytics_page(request: HttpRequest) -> HttpResponse:
    """Traffic, errors, latency, spend and tokens over the chosen range; `?format=csv` exports the series."""
    orgs = scope.visible_orgs(request.user)
    try:
        view = analytics.View.parse(request.GET, now=time.time(), orgs=orgs)
    except analytics.ViewError as exc:
        return _bad_request(request, "Analytics", str(exc))
    started = time.perf_counter()
    data = analytics.build(view)
    query_ms = (time.perf_counter() - started) * 1000
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="switchboard-usage-{view.range.name}.csv"'
        csv.writer(response).writerows(analytics.csv_rows(data))
        return response
    return render(
        request,
        "dashboard/analytics.html",
        {
            "title": "Analytics",
            "view": view,
            "ranges": analytics.RANGES.values(),
            "data": data,
            "totals": data["totals"],
            "top": data["top"],
            "savings": data["savings"],
            "choices": _choices(orgs),
            "csv_query": view.query_string(format="csv"),
            "query_ms": round(query_ms, 1),
            "uplot": UPLOT_DIR,
        },
    )


@usage_viewers_only
def request_log(request: HttpRequest) -> HttpResponse:
    """The newest usage records matching the filters, newest first."""
    orgs = scope.visible_orgs(request.user)
    try:
        search = browse.Search.parse(request.GET)
    except browse.SearchError as exc:
        return _bad_request(request, "Request log", str(exc))
    page = browse.find(search, orgs=orgs)
    return render(
        request,
        "dashboard/requests.html",
        {
            "title": "Request log",
            "search": search,
            "page": page,
            "choices": _choices(orgs),
            "statuses": browse.STATUS_CLASSES,
            "since_choices": [(1, "last hour"), (24, "last day"), (168, "last week"), (720, "last 30 days")],
            "page_size": browse.PAGE_SIZE,
        },
    )


@usage_viewers_only
def request_detail(request: HttpRequest, record_id: str) -> HttpResponse:
    """One record with its chain trail, each link with its provider and what happened there."""
    record = browse.get(record_id, scope.visible_orgs(request.user))  # another org's: 404, as if none
    if record is None:
        raise Http404("no usage record with this id")
    return render(
        request,
        "dashboard/request_detail.html",
        {
            "title": f"Request {record.request_id}",
            "record": record,
            "trail": browse.trail(record, live.current()),
            # bodies (docs/operations.md#bodies) may hold anything a client sent: superusers only
            "show_bodies": bodies.visible_to(request.user),
        },
    )
