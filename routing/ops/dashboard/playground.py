"""The playground (docs/dashboard.md#playground): a staff page that sends a chat through the gateway.

The page's script calls this gateway's own `/v1/models` and `/v1/chat/completions`
(same origin), so a chat goes through the same request path as any client: auth,
org policy, limits, budget, the chain, the usage record. Stored keys are hashed and
cannot be shown, so the page either mints a short-lived key for the chosen agent
(needs PLAYGROUND, the permission to create API keys: whoever holds it can mint a
key in the admin anyway) or uses a key the user pastes. It mints keys only for agents
of orgs the user manages (routing.ops.scope.MANAGE_ORG; superusers: every org): the
chat spends the org's budget, which only those who may set it may spend from here.
A minted key expires after
PLAYGROUND_KEY_TTL, is labelled with the user, and its plaintext goes only to the
page that asked for it; it is never stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from policies.keys import create_api_key
from policies.models import Agent, ApiKey
from routing.config import live
from routing.ops import scope
from routing.ops.dashboard.pages import may_view_usage
from routing.ops.usage import browse

PLAYGROUND = "policies.add_apikey"
PLAYGROUND_KEY_TTL = timedelta(minutes=15)
SESSION_PREFIXES = "switchboard_playground_keys"  # prefixes of the keys this session minted
LABEL = "playground"


def may_use_playground(user: Any) -> bool:
    """Active staff holding PLAYGROUND (superusers hold every permission)."""
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(PLAYGROUND))


def playground_users_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous: to the login page. Signed in without the permission: 403 saying which one."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not may_use_playground(user):
            return HttpResponseForbidden(
                f"The playground needs staff status and the {PLAYGROUND} permission (it mints a short-lived API"
                " key for the agent you pick); ask an administrator."
            )
        return view(request, *args, **kwargs)

    return wrapper


def mint_key(agent: Agent, username: str, now: datetime) -> tuple[ApiKey, str]:
    """A key for `agent` that expires after PLAYGROUND_KEY_TTL, labelled so the key list says whose it is."""
    return create_api_key(
        agent=agent,
        label=f"{LABEL}: {username}"[:100],
        expires_at=now + PLAYGROUND_KEY_TTL,
        note=f"Minted by the playground for {username}; expires on its own.",
    )


def _agents_of_managed_orgs(user: Any) -> list[Agent]:
    """The agents the user may spend through: those of the orgs the user manages (routing.ops.scope)."""
    agents = list(Agent.objects.select_related("org").order_by("org__name", "name"))
    managed = {org.pk for org in scope.managed_orgs(user, {a.org.pk: a.org for a in agents}.values())}
    return [a for a in agents if a.org.pk in managed]


@require_GET
@playground_users_only
def page(request: HttpRequest) -> HttpResponse:
    agents = _agents_of_managed_orgs(request.user)
    return render(
        request,
        "dashboard/playground.html",
        {
            "title": "Playground",
            "agents": [{"id": a.pk, "label": f"{a.org.name} / {a.name}"} for a in agents],
            "ttl_minutes": int(PLAYGROUND_KEY_TTL.total_seconds() // 60),
            "manage_permission": scope.MANAGE_ORG,
        },
    )


@require_POST
@playground_users_only
def key(request: HttpRequest) -> JsonResponse:
    """Mint a key for the posted agent id; answers {key, prefix, agent, expires_at}."""
    agent_id = request.POST.get("agent", "")
    agent = Agent.objects.select_related("org").filter(pk=int(agent_id)).first() if agent_id.isdigit() else None
    if agent is None:
        return JsonResponse(
            {"error": "No such agent: pick one from the list (reload the page if it changed)."}, status=400
        )
    if not scope.may_manage_org(request.user, agent.org):
        return JsonResponse(
            {
                "error": f"You do not manage org '{agent.org.name}' ({scope.MANAGE_ORG}), so the playground will not "
                "spend its budget for you: pick an agent from the list, or paste a key you hold."
            },
            status=403,
        )
    api_key, plaintext = mint_key(agent, request.user.get_username(), timezone.now())
    minted = request.session.get(SESSION_PREFIXES, [])[-19:]
    request.session[SESSION_PREFIXES] = [*minted, api_key.prefix]
    response = JsonResponse(
        {
            "key": plaintext,
            "prefix": api_key.prefix,
            "agent": str(agent),
            "expires_at": api_key.expires_at.isoformat() if api_key.expires_at else None,
        }
    )
    response["Cache-Control"] = "no-store"
    return response


def record_summary(record: Any) -> dict[str, Any]:
    """What the page shows of a usage record: trail, cost, tokens, timings (never bodies)."""
    return {
        "request_id": record.request_id,
        "status": record.status,
        "error_code": record.error_code,
        "model_used": record.model_used,
        "provider": record.provider,
        "attempts": record.attempts,
        "fallback_reason": record.fallback_reason,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cost_usd": None if record.cost is None else f"{record.cost:.8f}",
        "latency_ms": round(record.latency_ms, 1),
        "trail": [
            {"model": h.model, "provider": h.provider, "outcome": h.outcome, "meaning": h.meaning, "served": h.served}
            for h in browse.trail(record, live.current())
        ],
    }


@require_GET
@playground_users_only
def record(request: HttpRequest, request_id: str) -> JsonResponse:
    """The usage record of a playground request, once the usage writer has stored it (404 until then).

    Records of keys this session minted are shown; others need the usage pages' permission.
    """

    found = browse.get(request_id, scope.visible_orgs(request.user))  # another org's: 404, as if none
    if found is None:
        return JsonResponse({"error": "not recorded yet"}, status=404)
    if found.key_prefix not in request.session.get(SESSION_PREFIXES, []) and not may_view_usage(request.user):
        return JsonResponse({"error": "this request was not made with a key this session minted"}, status=403)
    return JsonResponse(record_summary(found))
