"""URLs of the management API under /api/v1/ (docs/management-api.md)."""

from django.urls import path, re_path

from routing.ops.api import views

urlpatterns = [
    path("openapi.json", views.openapi_view, name="api-openapi"),
    path("keys", views.keys_view, name="api-keys"),
    path("keys/<int:key_id>", views.key_view, name="api-key"),
    path("keys/<int:key_id>/rotate", views.key_rotate_view, name="api-key-rotate"),
    path("keys/<int:key_id>/revoke", views.key_revoke_view, name="api-key-revoke"),
    path("orgs", views.orgs_view, name="api-orgs"),
    path("orgs/<str:org>", views.org_view, name="api-org"),
    path("orgs/<str:org>/agents", views.agents_view, name="api-agents"),
    path("orgs/<str:org>/agents/<str:agent>", views.agent_view, name="api-agent"),
    path("usage", views.usage_view, name="api-usage"),
    path("requests", views.requests_view, name="api-requests"),
    path("audit", views.audit_view, name="api-audit"),
    path("breakers", views.breakers_view, name="api-breakers"),
    path("breakers/force-open", views.breaker_force_open_view, name="api-breaker-force-open"),
    path("breakers/reset", views.breaker_reset_view, name="api-breaker-reset"),
    re_path(r"^.*$", views.unknown_view),  # a JSON 404, never Django's HTML page
]
