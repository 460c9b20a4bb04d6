"""Organisations and agents over the management API (docs/management-api.md#orgs).

Every write is a small configuration document imported by `import_document`: the one
validation an import, the admin and a rollback go through, in a `recorder.change`
scope authored by the token's name (source "api"), so it is one revision of the
configuration history like any other change.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest

from policies.models import Org
from routing.config import recorder
from routing.config.document import document_from_db
from routing.config.store import ConfigInvalid, find_org, import_document
from routing.core import errors
from routing.ops import scope
from routing.ops.api.http import atomic, body, check_if_match, etag, listing, only, page, refuse

ORG_FIELDS = ("default_action", "limits", "budget", "log_bodies", "policies", "priority", "weight")
AGENT_FIELDS = ("default_model", "limits", "budget", "priority", "side_effects")  # docs/overload.md: the last two
SOURCE = "api"
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")


def _org_view(entry: dict[str, Any]) -> dict[str, Any]:
    """An org as the API shows it (its BYO credentials stay in the admin: they hold secrets)."""
    return {
        "object": "org",
        "name": entry["name"],
        "default_action": entry.get("default_action", "allow"),
        "limits": entry.get("limits"),
        "budget": entry.get("budget"),
        "log_bodies": bool(entry.get("log_bodies", False)),
        "policies": entry.get("policies") or [],
        "priority": entry.get("priority") or None,
        "weight": entry.get("weight"),
        "agents": [a["name"] for a in entry.get("agents") or []],
    }


def _agent_view(org: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "agent",
        "org": org,
        "name": entry["name"],
        "default_model": entry.get("default_model"),
        "limits": entry.get("limits"),
        "budget": entry.get("budget"),
        "priority": entry.get("priority") or None,
        "side_effects": bool(entry.get("side_effects", False)),
    }


def _allowed(token: Any, org: str) -> None:
    """An org-limited token reaches its own org only (others answer 404: not even their names leak); a name
    no org can have is no org either."""
    if (token.org_id and token.org.name != org) or not _SLUG.match(org):
        raise errors.resource_not_found(f"Org '{org[:64]}'")


def _org_entry(name: str, document: dict[str, Any] | None = None) -> dict[str, Any]:
    entry = find_org(document_from_db() if document is None else document, name)
    if entry is None:
        raise errors.resource_not_found(f"Org '{name}'")
    return entry


def _within_org(token: Any, document: dict[str, Any], org: str, data: dict[str, Any], current: dict[str, Any]) -> None:
    """An org-limited token gives an agent no more than its org has (an unlimited token: no check)."""
    bounds = scope.bounds_of(document, org) if token.org_id else None
    if bounds is not None:
        refuse(scope.child_refusals(bounds, data, current, f"agent '{org}/{data.get('name') or current.get('name')}'"))


def _agent_entry(org: dict[str, Any], name: str) -> dict[str, Any]:
    for agent in org.get("agents") or []:
        if agent.get("name") == name:
            return agent
    raise errors.resource_not_found(f"Agent '{org['name']}/{name}'")


def _scalars(entry: dict[str, Any]) -> dict[str, Any]:
    """The org's own fields for an import that must keep them as they are."""
    return {k: v for k, v in entry.items() if k not in ("agents", "credentials", "policies")}


def _import(token: Any, document: dict[str, Any], note: str) -> None:
    """Apply through the one validation and record it as the token's change; 400 listing every problem."""
    try:
        with recorder.change(author=token.name, source=SOURCE, note=note):
            import_document(document)
    except ConfigInvalid as invalid:
        first = invalid.errors[0].path if invalid.errors else None
        raise errors.invalid_request(
            "The change is invalid: " + "; ".join(str(e) for e in invalid.errors), first
        ) from None


def _fields(data: dict[str, Any], allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    only(data, allowed, what)
    return {k: v for k, v in data.items() if v is not None}


def list_orgs(request: HttpRequest, token: Any) -> dict[str, Any]:
    limit, offset = page(request)
    orgs = [o for o in document_from_db()["orgs"] if not token.org_id or o["name"] == token.org.name]
    return listing([_org_view(o) for o in orgs[offset : offset + limit]], len(orgs), limit, offset)


def get_org(token: Any, name: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    _allowed(token, name)
    shown = _org_view(_org_entry(name))
    return 200, shown, {"ETag": etag(shown)}


def create_org(request: HttpRequest, token: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    data = body(request)
    if token.org_id:
        raise errors.permission_denied(f"The token '{token.name}' is limited to org '{token.org.name}'.")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise errors.invalid_request("name is required: the new org's name (letters, digits, '-', '_').", "name")
    entry = {"name": name, **_fields({k: v for k, v in data.items() if k != "name"}, ORG_FIELDS, "a new org")}
    with atomic():
        if Org.objects.filter(name=name).exists():
            raise errors.conflict(f"An org named '{name}' exists: update it with PATCH /api/v1/orgs/{name}.")
        _import(token, {"orgs": [entry]}, f"org {name} created over the API")
    _, shown, headers = get_org(token, name)
    return 201, shown, headers


def update_org(request: HttpRequest, token: Any, name: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Change an org's fields; `null` removes limits or budget; `policies`, when sent, replace its list."""
    _allowed(token, name)
    data = body(request)
    only(data, ORG_FIELDS, "an org update")
    with atomic():
        Org.objects.select_for_update().filter(name=name).first()  # one writer at a time for this org
        entry = _org_entry(name)
        check_if_match(request, etag(_org_view(entry)), f"Org '{name}'")
        if token.org_id:  # the org's own controls are its operators' (routing.ops.scope)
            refuse(scope.org_refusals(entry, data))
        merged = {**_scalars(entry), **{k: v for k, v in data.items() if k != "policies"}}
        merged = {k: v for k, v in merged.items() if v is not None}
        if "policies" in data:
            merged["policies"] = data["policies"] or []
        _import(token, {"orgs": [merged]}, f"org {name} changed over the API")
    return get_org(token, name)


def list_agents(request: HttpRequest, token: Any, org: str) -> dict[str, Any]:
    _allowed(token, org)
    limit, offset = page(request)
    agents = _org_entry(org).get("agents") or []
    return listing([_agent_view(org, a) for a in agents[offset : offset + limit]], len(agents), limit, offset)


def get_agent(token: Any, org: str, name: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    _allowed(token, org)
    shown = _agent_view(org, _agent_entry(_org_entry(org), name))
    return 200, shown, {"ETag": etag(shown)}


def create_agent(request: HttpRequest, token: Any, org: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    _allowed(token, org)
    data = body(request)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise errors.invalid_request("name is required: the new agent's name (letters, digits, '-', '_').", "name")
    fields = _fields({k: v for k, v in data.items() if k != "name"}, AGENT_FIELDS, "a new agent")
    with atomic():
        Org.objects.select_for_update().filter(name=org).first()
        config = document_from_db()
        entry = _org_entry(org, config)
        if any(a.get("name") == name for a in entry.get("agents") or []):
            raise errors.conflict(f"Agent '{org}/{name}' exists: update it with PATCH.")
        _within_org(token, config, org, {"name": name, **fields}, {})
        document = {"orgs": [{**_scalars(entry), "agents": [{"name": name, **fields}]}]}
        _import(token, document, f"agent {org}/{name} created over the API")
    _, shown, headers = get_agent(token, org, name)
    return 201, shown, headers


def update_agent(request: HttpRequest, token: Any, org: str, name: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    _allowed(token, org)
    data = body(request)
    only(data, AGENT_FIELDS, "an agent update")
    with atomic():
        Org.objects.select_for_update().filter(name=org).first()
        config = document_from_db()
        entry = _org_entry(org, config)
        agent = _agent_entry(entry, name)
        check_if_match(request, etag(_agent_view(org, agent)), f"Agent '{org}/{name}'")
        _within_org(token, config, org, data, agent)
        merged = {k: v for k, v in {**agent, **data}.items() if v is not None}
        document = {"orgs": [{**_scalars(entry), "agents": [merged]}]}
        _import(token, document, f"agent {org}/{name} changed over the API")
    return get_agent(token, org, name)
