"""API keys over the management API (docs/management-api.md#keys): the same functions the admin
and `create_api_key` use (policies.keys), the same validation, shown once."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from policies.keys import CONTROLS, KeyProblems, create_api_key, revoke_keys, rotate_key, update_key
from policies.models import Agent, ApiKey, ManagementToken
from routing.config.document import document_from_db
from routing.core import errors
from routing.ops import scope
from routing.ops.api.http import (
    atomic,
    body,
    check_if_match,
    etag,
    iso,
    listing,
    only,
    page,
    parse_time,
    refuse,
    text_param,
)

CREATE_FIELDS = ("org", "agent", *CONTROLS)
MAX_GRACE_S = 30 * 86400
MAX_ID = 2**63 - 1  # a bigint column: a larger id in the path is no key, not a database error


def status_of(key: ApiKey) -> str:
    if key.revoked:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return "expired"
    return "active" if key.enabled else "disabled"


def represent(key: ApiKey) -> dict[str, Any]:
    """A key as the API shows it: never its secret or its hash."""
    rotating = bool(key.previous_hash) and key.previous_expires_at is not None
    return {
        "object": "api_key",
        "id": key.pk,
        "prefix": key.prefix,
        "name": key.label,
        "org": key.agent.org.name,
        "agent": key.agent.name,
        "status": status_of(key),
        "enabled": key.enabled,
        "revoked": key.revoked,
        "created_at": iso(key.created_at),
        "updated_at": iso(key.updated_at),
        "expires_at": iso(key.expires_at),
        "limits": key.limits,
        "budget": key.budget,
        "models": key.allowed_models,
        "priority": key.priority or None,
        "metadata": key.metadata or {},
        "note": key.note,
        "previous_secret_expires_at": iso(key.previous_expires_at) if rotating else None,
    }


def _visible(token: ManagementToken) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("agent__org")
    return keys.filter(agent__org=token.org) if token.org_id else keys


def find(token: ManagementToken, key_id: int, lock: bool = False) -> ApiKey:
    if key_id > MAX_ID:
        raise errors.resource_not_found(f"API key {key_id}")
    keys = _visible(token)
    key = (keys.select_for_update(of=("self",)) if lock else keys).filter(pk=key_id).first()
    if key is None:
        raise errors.resource_not_found(f"API key {key_id}")
    return key


def _problems(exc: KeyProblems) -> errors.GatewayError:
    path = exc.problems[0][0]
    return errors.invalid_request(
        "Invalid key controls: " + "; ".join(f"{p}: {m}" for p, m in exc.problems), path.split(".")[0].split("[")[0]
    )


def _controls(data: dict[str, Any]) -> dict[str, Any]:
    """The body's controls, typed: expires_at parsed; name and note strings."""
    controls = {k: v for k, v in data.items() if k in CONTROLS}
    if "expires_at" in controls:
        controls["expires_at"] = parse_time(controls["expires_at"], "expires_at")
    for text in ("name", "note"):
        if text in controls and controls[text] is not None and not isinstance(controls[text], str):
            raise errors.invalid_request(f"{text} must be a string.", text)
    if isinstance(controls.get("note"), str) and len(controls["note"]) > 2000:
        raise errors.invalid_request("note must be at most 2000 characters.", "note")
    return controls


def _within_org(token: ManagementToken, org: str, controls: dict[str, Any], key: ApiKey | None) -> None:
    """An org-limited token gives a key no more than its org has: 403 `forbidden` naming the field
    (routing.ops.scope; an unlimited token: no check, and no configuration read)."""
    if not token.org_id:
        return
    bounds = scope.bounds_of(document_from_db(), org)
    if bounds is None:
        return
    current = {} if key is None else represent(key)
    refuse(scope.child_refusals(bounds, controls, current, f"API key {key.pk}" if key else "the new API key"))


def list_keys(request: HttpRequest, token: ManagementToken) -> dict[str, Any]:
    """Keys, newest first; ?org=, ?agent=, ?status=active|disabled|expired|revoked filter them."""
    limit, offset = page(request)
    keys = _visible(token).order_by("-created_at", "-pk")
    org, agent, status = (text_param(request, n) for n in ("org", "agent", "status"))
    if org:
        keys = keys.filter(agent__org__name=org)
    if agent:
        keys = keys.filter(agent__name=agent)
    now = timezone.now()
    if status:
        filters = {
            "revoked": {"revoked": True},
            "expired": {"revoked": False, "expires_at__lte": now},
            "disabled": {"revoked": False, "enabled": False},
            "active": {"revoked": False, "enabled": True},
        }
        if status not in filters:
            raise errors.invalid_request("status must be one of active, disabled, expired, revoked.", "status")
        keys = keys.filter(**filters[status])
        if status in ("active", "disabled"):
            keys = keys.exclude(expires_at__lte=now)
    total = keys.count()
    return listing([represent(k) for k in keys[offset : offset + limit]], total, limit, offset)


def create(request: HttpRequest, token: ManagementToken) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A new key for an agent; the answer carries its secret, once."""
    data = body(request)
    only(data, CREATE_FIELDS, "a new API key")
    for field in ("org", "agent"):
        if not isinstance(data.get(field), str) or not data[field]:
            raise errors.invalid_request(f"{field} is required: the name of the key's {field}.", field)
    if token.org_id and data["org"] != token.org.name:
        raise errors.permission_denied(f"The token '{token.name}' is limited to org '{token.org.name}'.")
    agent = Agent.objects.select_related("org").filter(org__name=data["org"], name=data["agent"]).first()
    if agent is None:
        raise errors.resource_not_found(f"Agent '{data['org']}/{data['agent']}'")
    controls = _controls(data)
    _within_org(token, agent.org.name, controls, None)
    name, note = controls.pop("name", "") or "", controls.pop("note", "") or ""
    try:
        key, secret = create_api_key(
            agent=agent, label=name, note=note, expires_at=controls.pop("expires_at", None), **controls
        )
    except KeyProblems as exc:
        raise _problems(exc) from None
    shown = represent(key)
    return 201, {**shown, "secret": secret}, {"ETag": etag(shown)}


def get(token: ManagementToken, key_id: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    shown = represent(find(token, key_id))
    return 200, shown, {"ETag": etag(shown)}


def update(request: HttpRequest, token: ManagementToken, key_id: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Change a key's controls; with If-Match, only if nobody changed it since (else 412)."""
    data = body(request)
    only(data, CONTROLS, "an API key update")
    controls = _controls(data)
    with atomic():
        key = find(token, key_id, lock=True)  # the row lock makes the If-Match check and the write one step
        if key.revoked:
            raise errors.conflict(f"API key {key_id} is revoked; a revoked key cannot be changed. Create a new one.")
        check_if_match(request, etag(represent(key)), f"API key {key_id}")
        _within_org(token, key.agent.org.name, controls, key)
        try:
            update_key(key, controls)
        except KeyProblems as exc:
            raise _problems(exc) from None
    shown = represent(find(token, key_id))
    return 200, shown, {"ETag": etag(shown)}


def rotate(request: HttpRequest, token: ManagementToken, key_id: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A new secret (same prefix); the current one keeps working `grace_seconds` (default 0)."""
    data = body(request)
    only(data, ("grace_seconds",), "a rotation")
    grace = data.get("grace_seconds", 0)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= MAX_GRACE_S:
        raise errors.invalid_request(
            f"grace_seconds must be a number of seconds from 0 to {MAX_GRACE_S} (30 days).", "grace_seconds"
        )
    with atomic():
        key = find(token, key_id, lock=True)
        if key.revoked:
            raise errors.conflict(f"API key {key_id} is revoked; it cannot be rotated. Create a new one.")
        check_if_match(request, etag(represent(key)), f"API key {key_id}")
        secret = rotate_key(key, float(grace))
    shown = represent(find(token, key_id))
    return 200, {**shown, "secret": secret}, {"ETag": etag(shown)}


def revoke(request: HttpRequest, token: ManagementToken, key_id: int) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Revoke for good (both secrets of a rotating key); every process refuses it within the reload bound."""
    with atomic():
        key = find(token, key_id, lock=True)
        check_if_match(request, etag(represent(key)), f"API key {key_id}")
        revoke_keys(ApiKey.objects.filter(pk=key.pk))
    shown = represent(find(token, key_id))
    return 200, shown, {"ETag": etag(shown)}
