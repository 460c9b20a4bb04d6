"""Dashboard pages (staff only); the live updates come over the /ws/dashboard/ socket."""

from django.urls import path

from routing.ops import dashboard_views

app_name = "dashboard"

urlpatterns = [
    path("", dashboard_views.index, name="index"),
    path("usage/", dashboard_views.usage_summary, name="usage"),
]
