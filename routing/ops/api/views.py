"""The management API's Django views: thin, each one line into its module (docs/management-api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from routing.core import errors
from routing.ops.api import audit, breakers, keys, orgs, requests, usage
from routing.ops.api.http import api, error_response, respond

OPENAPI_PATH = Path(__file__).with_name("openapi.json")


@api("GET", "POST")
def keys_view(request: HttpRequest, token: Any) -> Any:
    if request.method == "POST":
        return keys.create(request, token)
    return 200, keys.list_keys(request, token)


@api("GET", "PATCH")
def key_view(request: HttpRequest, token: Any, key_id: int) -> Any:
    if request.method == "PATCH":
        return keys.update(request, token, key_id)
    return keys.get(token, key_id)


@api("POST")
def key_rotate_view(request: HttpRequest, token: Any, key_id: int) -> Any:
    return keys.rotate(request, token, key_id)


@api("POST")
def key_revoke_view(request: HttpRequest, token: Any, key_id: int) -> Any:
    return keys.revoke(request, token, key_id)


@api("GET", "POST")
def orgs_view(request: HttpRequest, token: Any) -> Any:
    if request.method == "POST":
        return orgs.create_org(request, token)
    return 200, orgs.list_orgs(request, token)


@api("GET", "PATCH")
def org_view(request: HttpRequest, token: Any, org: str) -> Any:
    if request.method == "PATCH":
        return orgs.update_org(request, token, org)
    return orgs.get_org(token, org)


@api("GET", "POST")
def agents_view(request: HttpRequest, token: Any, org: str) -> Any:
    if request.method == "POST":
        return orgs.create_agent(request, token, org)
    return 200, orgs.list_agents(request, token, org)


@api("GET", "PATCH")
def agent_view(request: HttpRequest, token: Any, org: str, agent: str) -> Any:
    if request.method == "PATCH":
        return orgs.update_agent(request, token, org, agent)
    return orgs.get_agent(token, org, agent)


@api("GET")
def usage_view(request: HttpRequest, token: Any) -> Any:
    return 200, usage.usage(request, token)


@api("GET")
def requests_view(request: HttpRequest, token: Any) -> Any:
    return 200, requests.list_requests(request, token)


@api("GET")
def audit_view(request: HttpRequest, token: Any) -> Any:
    return 200, audit.list_audit(request, token)


@api("GET")
def breakers_view(request: HttpRequest, token: Any) -> Any:
    return 200, breakers.list_breakers(token)


@api("POST")
def breaker_force_open_view(request: HttpRequest, token: Any) -> Any:
    return 200, breakers.control(request, token, "force_open")


@api("POST")
def breaker_reset_view(request: HttpRequest, token: Any) -> Any:
    return 200, breakers.control(request, token, "reset")


@csrf_exempt
def unknown_view(request: HttpRequest) -> HttpResponse:
    return error_response(errors.resource_not_found(f"The management API path '{request.path[:200]}'"))


def openapi_view(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3.1 document of this API (no token needed: it describes, it holds nothing)."""
    return respond(200, orjson.loads(OPENAPI_PATH.read_bytes()))
