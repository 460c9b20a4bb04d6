"""Dashboard pages (staff only); the live updates come over the /ws/dashboard/ socket."""

from django.urls import path

from routing.ops.dashboard import limits, pages, playground, views

app_name = "dashboard"

urlpatterns = [
    path("", views.index, name="index"),
    path("usage/", views.usage_summary, name="usage"),
    path("analytics/", pages.analytics_page, name="analytics"),
    path("requests/", pages.request_log, name="requests"),
    path("requests/<str:record_id>/", pages.request_detail, name="request"),
    path("processes/", views.processes_view, name="processes"),
    path("limits/", limits.limits_view, name="limits"),
    path("playground/", playground.page, name="playground"),
    path("playground/key/", playground.key, name="playground-key"),
    path("playground/record/<str:request_id>/", playground.record, name="playground-record"),
]
