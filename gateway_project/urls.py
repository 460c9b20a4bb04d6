"""Django-side URLs: admin, dashboard pages, metrics. /v1 and /health never reach here."""

from django.contrib import admin
from django.urls import include, path

from routing.ops import admin_views, site, views

# "View site" in the admin header: the operators' live page (the gateway has no home page).
admin.site.site_url = "/dashboard/"

urlpatterns = [
    path("favicon.ico", site.favicon_view, name="favicon"),
    path("admin/explain-route/", admin.site.admin_view(admin_views.explain_route_view), name="explain-route"),
    path("admin/", admin.site.urls),
    path("dashboard/", include("routing.ops.dashboard_urls")),
    path("metrics", views.metrics_view, name="metrics"),
]
