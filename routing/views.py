"""Django-side views: /metrics."""

from django.http import HttpRequest, HttpResponse


def metrics_view(request: HttpRequest) -> HttpResponse:
    from django_prometheus.exports import ExportToDjangoView

    return ExportToDjangoView(request)
