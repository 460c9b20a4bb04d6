"""The page that shows a new API key's or management token's plaintext, once."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse


def secret_shown_once(
    model_admin: admin.ModelAdmin, request: HttpRequest, obj: Any, session_key: str, noun: str, name: str, template: str
) -> HttpResponse:
    """The page that shows a new key or token's plaintext once: it leaves the session as it is
    rendered and the page is never cached, so a reload or the back button shows it no more."""
    held = request.session.get(session_key) or {}
    plaintext = None
    if held.get("pk") == obj.pk:
        plaintext = held["plaintext"]
        del request.session[session_key]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"{noun} created" if plaintext else noun,
        name: obj,
        "plaintext": plaintext,
    }
    response = TemplateResponse(request, template, context)
    response["Cache-Control"] = "no-store"
    return response
