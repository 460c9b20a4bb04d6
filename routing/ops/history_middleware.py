"""Attribute configuration changes made through the admin to the admin user (docs/config-history.md#recording),
and every write of the request to that user and address in the audit log (docs/audit.md).

Every POST under /admin/ by a signed-in user runs in one `recorder.change` scope:
one transaction, and at most one history revision per request, authored by the user
with source "admin". Other requests pass straight through (the gateway's /v1 path
never reaches Django's middleware at all).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from routing.config import audit
from routing.config.recorder import change


class ConfigAuthorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if request.method == "POST" and request.path.startswith("/admin/") and user and user.is_authenticated:
            name = user.get_username()
            with change(author=name, source="admin"), audit.acting(name, "admin", audit.client_address(request)):
                return self.get_response(request)
        return self.get_response(request)
