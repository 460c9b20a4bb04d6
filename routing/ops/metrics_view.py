"""The /metrics page: the Prometheus exposition, staff only unless SWITCHBOARD_METRICS_PUBLIC."""

from __future__ import annotations

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from routing.config import live
from routing.runtime import overload
from routing.runtime.observe import feed, metrics
from routing.runtime.process import current

FORBIDDEN = orjson.dumps(
    {
        "error": {
            "message": "/metrics is restricted to staff (SWITCHBOARD_METRICS_PUBLIC is false): "
            "log in to the admin as a staff user, or make it public.",
            "type": "permission_error",
            "code": "forbidden",
            "param": None,
        }
    }
)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the default registry (django-prometheus + docs/metrics.md)."""
    if not settings.SWITCHBOARD_METRICS_PUBLIC:
        user = getattr(request, "user", None)
        if not (user is not None and user.is_authenticated and user.is_active and user.is_staff):
            return HttpResponse(FORBIDDEN, status=403, content_type="application/json")
    from django_prometheus.exports import ExportToDjangoView

    views = feed.call_on_loop(current().breakers.views)  # breakers belong to the serving loop's thread
    metrics.refresh_circuits(live.current(), views)
    feed.call_on_loop(overload.refresh_metrics)  # gates belong to the serving loop too (docs/overload.md)
    return ExportToDjangoView(request)
