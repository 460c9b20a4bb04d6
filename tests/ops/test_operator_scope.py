"""Org-scoped staff (docs/operations.md#org-scoped-staff): an operator limited to org A, holding every permission
of the gateway's apps, walks every admin change list and every staff page with orgs A and B both full of data,
and meets B nowhere; it runs A's keys and agents within A's bounds and never changes A itself. Through Django's
test client and the real database."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from policies.keys import create_api_key
from policies.models import Agent, ApiKey, OperatorScope, Org
from policies.tokens import create_management_token
from routing.config import live
from routing.config.document import document_from_db
from routing.config.snapshot import build_snapshot
from routing.config.store import import_document
from routing.models import AuditRecord, BreakerOverride, ConfigRevision, UsageRecord
from routing.ops import scope
from routing.ops.admin_base import GLOBAL, HIDDEN, OrgScopedAdmin
from routing.ops.dashboard.state import scoped_state

pytestmark = pytest.mark.django_db(transaction=True)
B = "bravo"  # every name of org B starts with it, and nothing of org A or the catalogue holds it


def _org(name: str, agent: str, rpm: int) -> dict:
    return {
        "name": name,
        "default_action": "deny",
        "limits": {"rpm": rpm},
        "budget": {"usd": 5, "period": "month"},
        "policies": [{"pattern": "cheap-*", "action": "allow"}],
        "agents": [{"name": agent, "limits": {"rpm": 1}, "budget": {"usd": 1, "period": "month"}}],
        "credentials": [{"provider": "mock", "base_url": f"http://127.0.0.1:9/{name}"}],
    }


DOC = {
    "providers": [{"name": "mock", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"id": "cheap-a", "provider": "mock", "upstream_model": "x", "capabilities": ["chat"]}],
    "orgs": [_org("alpha", "alpha-bot", 10), _org("bravo-org", "bravo-bot", 7)],
}


def _records(org: str, agent: str, count: int) -> None:
    now = timezone.now()
    for i in range(count):
        UsageRecord.objects.create(
            request_id=f"{org}-req-{i}",
            created_at=now,
            endpoint="chat",
            org=org,
            agent=agent,
            key_prefix=f"{org[:5]}-kp",
            model_used=f"{org}-model",
            provider=f"{org}-prov",
            status=200,
            cost="0.5",
        )


@pytest.fixture
def world():
    """Orgs A (alpha) and B (bravo-org), each with keys, a token, usage (records and rollups), audit records
    and a breaker override, served as the live snapshot."""
    import_document(DOC)
    for org, agent in (("alpha", "alpha-bot"), ("bravo-org", "bravo-bot")):
        create_api_key(agent=Agent.objects.get(name=agent), label=f"{org}-key-label")
        create_management_token(name=f"{org}-token", scope="read", org=Org.objects.get(name=org))
        AuditRecord.objects.create(at=timezone.now(), actor=f"{org}-actor", action="change", org=org)
        BreakerOverride.objects.create(provider="mock", model="cheap-a", org=org, action="reset", user=f"{org}-u")
    _records("alpha", "alpha-bot", 3)
    _records("bravo-org", "bravo-bot", 5)
    call_command("usage_rollup", stdout=io.StringIO())
    previous = live.current()
    live.swap(build_snapshot(document_from_db(), [], os.environ, version=1, config_version=1))
    yield
    live.swap(previous)


@pytest.fixture
def operator(world) -> Client:
    """`create_operator` for org A, signed in with the password it printed once, then (as a careless
    administrator might) given every permission of the gateway's apps: the scope alone keeps B out."""
    out = io.StringIO()
    call_command("create_operator", "alice", "--org", "alpha", stdout=out)
    password = out.getvalue().strip().splitlines()[-1]
    user = get_user_model().objects.get(username="alice")
    assert user.is_staff and not user.is_superuser and user.groups.filter(name=scope.ORG_OPERATORS_GROUP).exists()
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["policies", "providers", "routing", "auth"])
    )
    client = Client()
    assert client.login(username="alice", password=password)
    return client


def _changelists() -> list[str]:
    return [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist") for model in admin.site._registry
    ]


STAFF_PAGES = [
    "/admin/",
    "/admin/explain-route/",
    "/admin/explain-route/?org=bravo-org&model=cheap-a&kind=chat",
    "/dashboard/",
    "/dashboard/usage/?hours=720",
    "/dashboard/analytics/?range=hour",
    "/dashboard/analytics/?range=day",
    "/dashboard/analytics/?range=day&format=csv",
    "/dashboard/analytics/?range=hour&org=bravo-org",
    "/dashboard/requests/",
    "/dashboard/requests/?org=bravo-org",
    "/dashboard/requests/bravo-org-req-0/",
    "/dashboard/limits/",
    "/dashboard/processes/",
    "/dashboard/playground/",
    "/dashboard/playground/record/bravo-org-req-0/",
    "/admin/autocomplete/?app_label=policies&model_name=apikey&field_name=agent",
    "/admin/autocomplete/?app_label=policies&model_name=agent&field_name=org",
]


def test_every_admin_list_and_staff_page_shows_a_scoped_operator_none_of_the_other_org(operator):
    seen = {}
    for url in _changelists() + STAFF_PAGES:
        response = operator.get(url, follow=True)
        body = response.content.decode()
        assert response.status_code in (200, 403, 404), (url, response.status_code)
        # A page asked about B by name may echo the name it was asked; none shows anything of B's.
        marks = ("bravo-bot", "bravo-org-req", "bravo-org-model", "bravo-org-key") if B in url else (B,)
        for mark in marks:
            assert mark not in body.lower(), (
                url,
                body[body.lower().index(mark) - 300 : body.lower().index(mark) + 100],
            )
        seen[url] = (response.status_code, body)
    # Not vacuous: the operator's own org is there, with every list and page open to it.
    for url in ("/admin/policies/org/", "/admin/policies/agent/", "/admin/policies/apikey/", "/dashboard/limits/"):
        assert seen[url][0] == 200 and "alpha" in seen[url][1], url
    for url in ("/admin/routing/usagerecord/", "/admin/routing/auditrecord/", "/dashboard/requests/"):
        assert seen[url][0] == 200 and "alpha" in seen[url][1], url
    assert seen["/dashboard/requests/bravo-org-req-0/"][0] == 404
    assert "not one of the available choices" in seen["/admin/explain-route/?org=bravo-org&model=cheap-a&kind=chat"][1]
    assert seen["/admin/routing/configrevision/"][0] == 403  # each version is every org's document
    assert seen["/admin/policies/operatorscope/"][0] == 403
    assert seen["/admin/auth/user/"][0] == seen["/admin/auth/group/"][0] == 403  # they name every org's operators
    assert seen["/admin/providers/model/"][0] == 200 and "cheap-a" in seen["/admin/providers/model/"][1]


def _analytics(client: Client, query: str) -> dict:
    html = client.get(f"/dashboard/analytics/?{query}").content.decode()
    start = html.index('<script id="analytics-data" type="application/json">')
    return json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])


@pytest.mark.parametrize("query", ["range=hour", "range=day"], ids=["records", "rollups"])
def test_analytics_counts_only_the_operators_orgs(operator, query, admin_client):
    assert sum(_analytics(operator, query)["requests"]) == 3
    assert sum(_analytics(admin_client, query)["requests"]) == 8  # the superuser: both orgs


def test_a_superuser_sees_both_orgs_on_the_same_pages(world, admin_client):
    for url in ("/admin/policies/org/", "/admin/policies/apikey/", "/dashboard/requests/", "/dashboard/limits/"):
        assert B in admin_client.get(url).content.decode(), url


def test_the_other_orgs_objects_cannot_be_opened_or_chosen(operator):
    bravo_agent = Agent.objects.get(name="bravo-bot")
    bravo_key = ApiKey.objects.get(agent=bravo_agent)
    for url in (f"/admin/policies/agent/{bravo_agent.pk}/change/", f"/admin/policies/apikey/{bravo_key.pk}/change/"):
        assert operator.get(url).status_code == 302  # the admin's "does not exist", back to the index
    assert operator.post(f"/admin/policies/apikey/{bravo_key.pk}/revoke/").status_code == 404
    revision = ConfigRevision.objects.order_by("-version").first()
    assert operator.get(f"/admin/routing/configrevision/{revision.pk}/change/").status_code == 403
    assert operator.post(f"/admin/routing/configrevision/{revision.pk}/rollback/").status_code == 403
    assert not ApiKey.objects.get(pk=bravo_key.pk).revoked
    form = {"org": Org.objects.get(name="bravo-org").pk, "name": "sneaky", "default_model": "", "priority": ""}
    form |= {"budget_usd": "", "budget_period": "month", "limits_rpm": "", "limits_tpm": ""}
    refused = operator.post("/admin/policies/agent/add/", form)
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not Agent.objects.filter(name="sneaky").exists()


def _key_form(agent: Agent, **fields) -> dict:
    form = {"agent": agent.pk, "label": "k", "note": "", "enabled": "on", "metadata": "{}", "priority": ""}
    form |= {"limits_rpm": "", "limits_tpm": "", "budget_usd": "", "budget_period": "month", "allowed_models": "null"}
    return form | fields


def test_the_operator_runs_its_orgs_keys_within_the_orgs_bounds(operator):
    agent = Agent.objects.get(name="alpha-bot")
    refused = operator.post("/admin/policies/apikey/add/", _key_form(agent, limits_rpm="50"))
    assert refused.status_code == 200 and "above org" in refused.content.decode()
    assert operator.post("/admin/policies/apikey/add/", _key_form(agent, limits_rpm="5")).status_code == 302
    assert ApiKey.objects.filter(agent=agent, limits={"rpm": 5}).exists()


def test_the_operator_cannot_raise_its_own_orgs_limits(operator):
    alpha = Org.objects.get(name="alpha")
    form = {"name": "alpha", "default_action": "allow", "limits_rpm": "100000", "limits_tpm": ""}
    form |= {"budget_usd": "", "budget_period": "month", "priority": "", "weight": ""}
    assert operator.post(f"/admin/policies/org/{alpha.pk}/change/", form).status_code == 403
    alpha.refresh_from_db()
    assert alpha.limits == {"rpm": 10} and alpha.default_action == "deny"
    assert operator.post("/admin/providers/provider/add/", {"name": "x"}).status_code == 403  # global config


def test_create_operator_refuses_unknown_orgs_groups_and_existing_users(world):
    with pytest.raises(CommandError, match="no organisation named nope"):
        call_command("create_operator", "bob", "--org", "nope", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no group named ghosts"):
        call_command("create_operator", "bob", "--org", "alpha", "--group", "ghosts", stdout=io.StringIO())
    call_command("create_operator", "bob", "--org", "alpha", "--org", "bravo-org", stdout=io.StringIO())
    assert scope.visible_orgs(get_user_model().objects.get(username="bob")) == {"alpha", "bravo-org"}
    with pytest.raises(CommandError, match="exists"):
        call_command("create_operator", "bob", "--org", "alpha", stdout=io.StringIO())


def test_a_scope_whose_orgs_are_gone_sees_no_org_rather_than_every_org(world, django_user_model):
    user = django_user_model.objects.create_user("gone", is_staff=True)
    OperatorScope.objects.create(user=user)
    assert scope.visible_orgs(user) == frozenset()
    assert scope.visible_orgs(django_user_model.objects.create_user("plain", is_staff=True)) is None


def test_every_admin_of_the_gateway_says_how_its_model_reaches_an_org():
    """A new ModelAdmin cannot forget the scope: it derives from OrgScopedAdmin (else this fails) and, saying
    nothing, is hidden from scoped operators."""
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in ("policies", "providers", "routing", "auth"):
            assert isinstance(model_admin, OrgScopedAdmin), model._meta.label
            path = model_admin.org_path
            assert path in (GLOBAL, HIDDEN) or model.objects.filter(**{f"{path}__in": []}).count() == 0


def test_the_live_dashboard_drops_other_orgs_breakers_and_events():
    message = {
        "type": "state",
        "links": [
            {"link": "mock/cheap-a", "org": None, "org_views": [{"org": "alpha"}, {"org": "bravo-org"}]},
            {"link": "mock/cheap-a@bravo-org", "org": "bravo-org", "org_views": []},
        ],
        "feed": [{"kind": "breaker", "org": "bravo-org"}, {"kind": "breaker", "org": "alpha"}, {"kind": "x"}],
    }
    scoped = scoped_state(message, frozenset({"alpha"}))
    assert B not in json.dumps(scoped)
    assert scoped["links"][0]["org_open"] == ["alpha"] and len(scoped["feed"]) == 2
    assert scoped_state(message, None) is message
