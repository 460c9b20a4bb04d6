"""Django-side URLs: landing page, docs, admin, dashboard pages, metrics. /v1 and /health never reach here."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from routing.ops import admin_views, landing, metrics_view

# "View site" in the admin header: the operators' live page; `/` is the landing page for everyone.
admin.site.site_url = "/dashboard/"
admin.site.site_header = "Switchboard administration"
admin.site.site_title = "Switchboard admin"
admin.site.index_title = "Switchboard: configuration and operations"
# No model list down the left of every page: it took 300 of 1280 px from the tables (the index lists the models).
admin.site.enable_nav_sidebar = False

urlpatterns = [
    path("", landing.landing_view, name="landing"),
    # <path:...>: a name with a slash reaches the view, which refuses it with its own 404 page
    path("docs/<path:name>.md", landing.doc_view, name="doc"),
    path("docs/<path:name>.png", landing.doc_image_view, name="doc-image"),
    path("reference/", landing.reference_view, name="reference"),
    path("reference/management/", landing.reference_view, {"api": "management"}, name="reference-management"),
    path("favicon.ico", landing.favicon_view, name="favicon"),
    *admin_views.urlpatterns(admin.site),  # the admin pages that are not change lists (admin_views.PAGES)
    path("admin/", admin.site.urls),
    path("dashboard/", include("routing.ops.dashboard.urls")),
    path("metrics", metrics_view.metrics_view, name="metrics"),
    path("api/v1/", include("routing.ops.api.urls")),  # the management API (docs/management-api.md)
]
if settings.SWITCHBOARD_OIDC_ISSUER:  # single sign-on (docs/sso.md)
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))
