"""Dashboard pages (staff only); the live updates come over the /ws/dashboard/ socket."""

from django.urls import path

from routing.ops.dashboard import limits, views

app_name = "dashboard"

urlpatterns = [
    path("", views.index, name="index"),
    path("usage/", views.usage_summary, name="usage"),
    path("limits/", limits.limits_view, name="limits"),
]
