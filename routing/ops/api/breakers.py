"""Breakers over the management API (docs/management-api.md#breakers): the dashboard's view of the links,
and the one operator verb of routing.ops.controls (the dashboard's and `manage.py breaker`'s)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from routing.config.identifiers import text_problem
from routing.core import errors
from routing.ops import controls
from routing.ops.api.http import body, only
from routing.ops.dashboard.state import build_state


def _global(token: Any) -> None:
    if token.org_id:
        raise errors.permission_denied(
            f"The token '{token.name}' is limited to org '{token.org.name}'; breakers are shared by every org."
        )


def list_breakers(token: Any) -> dict[str, Any]:
    """Every link's breaker as this process sees it (with REDIS_URL, the cluster's as of its last sync)."""
    _global(token)
    links = build_state()["links"]
    return {"object": "list", "data": links, "total": len(links), "limit": len(links), "offset": 0, "next_offset": None}


def control(request: HttpRequest, token: Any, verb: str) -> dict[str, Any]:
    """reset or force_open one breaker, by its key (`["provider", "model"]`, BYO: a third "org:<name>")."""
    _global(token)
    data = body(request)
    only(data, ("key", "reason", "minutes") if verb == "force_open" else ("key", "reason"), f"a breaker {verb}")
    key, reason, minutes = data.get("key"), data.get("reason") or "", data.get("minutes")
    if not isinstance(key, list) or not all(isinstance(part, str) for part in key):
        raise errors.invalid_request("key must be [provider, model] or [provider, model, 'org:<org>'].", "key")
    if not isinstance(reason, str):
        raise errors.invalid_request("reason must be a string.", "reason")
    if problem := text_problem(reason.strip(), "reason"):
        raise errors.invalid_request(f"The breaker control was refused: {problem}.", "reason")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int | float)):
        raise errors.invalid_request("minutes must be a number (absent: until reset).", "minutes")
    try:
        done = controls.apply(verb, key, f"api:{token.name}", reason, minutes)
    except controls.ControlError as exc:
        raise errors.invalid_request(f"The breaker control was refused: {exc.for_cli()}.", "key") from None
    return {"object": "breaker_control", "action": done.action, "key": done.key.wire(), "until": done.until}
