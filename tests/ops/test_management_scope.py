"""Org scope (docs/security.md#management-tokens-and-org-scope): an org-limited management token manages its
org's keys and agents within the org's bounds, never the org's own controls; tokens expire; the playground
spends only orgs its user manages. Through Django's test client and the real database."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from policies.models import Agent, ApiKey, ManagementToken, Org
from policies.tokens import create_management_token
from routing.config.document import document_from_db
from routing.config.store import find_org, import_document

pytestmark = pytest.mark.django_db(transaction=True)
ORG = {
    "name": "orga",
    "default_action": "deny",
    "limits": {"rpm": 5, "tpm": 1000},
    "budget": {"usd": 1, "period": "month"},
    "priority": "default",
    "weight": 1,
    "policies": [{"pattern": "cheap-*", "action": "allow"}],
    "agents": [{"name": "bot"}],
}
DOC = {
    "providers": [{"name": "mock", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [
        {"id": "cheap-a", "provider": "mock", "upstream_model": "x", "capabilities": ["chat"]},
        {"id": "pricey-a", "provider": "mock", "upstream_model": "y", "capabilities": ["chat"]},
    ],
    "aliases": {"fast": "cheap-a", "best": "pricey-a"},
    "orgs": [ORG, {"name": "other", "agents": [{"name": "bot"}]}],
}
# Each of the audit's escalations of the org's own controls, as a PATCH of the org, with the field refused.
ESCALATIONS = [
    ({"budget": {"usd": 1000000, "period": "total"}}, "budget"),
    ({"limits": None}, "limits"),
    ({"limits": {"rpm": 500}}, "limits"),
    ({"default_action": "allow"}, "default_action"),
    ({"policies": []}, "policies"),
    ({"priority": "interactive"}, "priority"),
    ({"weight": 1000000}, "weight"),
    ({"log_bodies": True}, "log_bodies"),
    (
        {"policies": [{"pattern": "cheap-*", "action": "allow", "fallback_chain": ["pricey-a"]}]},
        "policies[0].fallback_chain",
    ),
]


@pytest.fixture
def orga():
    import_document(DOC)
    _, secret = create_management_token(name="tenant", scope="write", org=Org.objects.get(name="orga"))
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def _post(api: Client, path: str, data: dict):
    return api.post(path, data, content_type="application/json")


def _patch(api: Client, path: str, data: dict):
    return api.patch(path, data, content_type="application/json")


def _org_now() -> dict:
    return find_org(document_from_db(), "orga")


@pytest.mark.parametrize(("change", "param"), ESCALATIONS, ids=[p for _, p in ESCALATIONS])
def test_an_org_limited_token_cannot_change_its_orgs_own_controls(orga, change, param):
    before = _org_now()
    refused = _patch(orga, "/api/v1/orgs/orga", change)
    assert refused.status_code == 403, refused.content
    error = refused.json()["error"]
    assert (error["code"], error["type"], error["param"]) == ("forbidden", "permission_error", param)
    assert "orga" in error["message"]
    assert _org_now() == before


def test_resending_the_orgs_current_values_is_no_change_and_is_accepted(orga):
    shown = orga.get("/api/v1/orgs/orga").json()
    same = {k: shown[k] for k in ("default_action", "limits", "budget", "log_bodies", "policies", "priority", "weight")}
    answer = _patch(orga, "/api/v1/orgs/orga", same)
    assert answer.status_code == 200, answer.content


def test_an_unlimited_token_still_changes_the_org():
    import_document(DOC)
    _, secret = create_management_token(name="operator", scope="write")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    answer = _patch(api, "/api/v1/orgs/orga", {"budget": {"usd": 50, "period": "month"}, "limits": None})
    assert answer.status_code == 200 and answer.json()["budget"]["usd"] == 50 and answer.json()["limits"] is None


# Keys: field by field, the refused side and the accepted side.
KEY_REFUSED = [
    ({"budget": {"usd": 5, "period": "day"}}, "budget"),
    ({"limits": {"rpm": 6}}, "limits"),
    ({"limits": {"tpm": 100000}}, "limits"),
    ({"priority": "interactive"}, "priority"),
    ({"models": ["pricey-*"]}, "models"),
    ({"models": ["*"]}, "models"),
    ({"models": ["best"]}, "models"),  # an alias of a model the org denies
    ({"models": ["gpt-5"]}, "models"),  # no model yet: the name itself, judged by the org's policy
]
KEY_ACCEPTED = [
    {"budget": {"usd": 1, "period": "month"}},
    {"budget": {"usd": 0.5, "period": "day"}},
    {"limits": {"rpm": 5, "tpm": 10}},
    {"limits": None},
    {"priority": "default"},
    {"priority": "batch"},
    {"models": ["cheap-*", "fast"]},
    {"models": None},
]


@pytest.mark.parametrize(("controls", "param"), KEY_REFUSED, ids=[str(c) for c, _ in KEY_REFUSED])
def test_a_key_gets_no_more_than_its_org_has(orga, controls, param):
    created = _post(orga, "/api/v1/keys", {"org": "orga", "agent": "bot", **controls})
    assert created.status_code == 403, created.content
    assert (created.json()["error"]["code"], created.json()["error"]["param"]) == ("forbidden", param)
    assert not ApiKey.objects.exists()
    key = _post(orga, "/api/v1/keys", {"org": "orga", "agent": "bot"}).json()
    changed = _patch(orga, f"/api/v1/keys/{key['id']}", controls)
    assert changed.status_code == 403 and changed.json()["error"]["param"] == param
    assert _patch(orga, f"/api/v1/keys/{key['id']}", {}).json() == orga.get(f"/api/v1/keys/{key['id']}").json()


@pytest.mark.parametrize("controls", KEY_ACCEPTED, ids=[str(c) for c in KEY_ACCEPTED])
def test_the_same_token_creates_and_limits_keys_within_the_org(orga, controls):
    created = _post(orga, "/api/v1/keys", {"org": "orga", "agent": "bot", **controls})
    assert created.status_code == 201, created.content
    field = next(iter(controls))
    assert created.json()[field] == controls[field]
    changed = _patch(orga, f"/api/v1/keys/{created.json()['id']}", {**controls, "name": "renamed"})
    assert changed.status_code == 200 and changed.json()["name"] == "renamed"


def test_a_key_set_past_the_bounds_by_an_operator_can_still_be_edited_by_the_tenant(orga):
    """Only what the tenant changes is judged: an operator's wider key stays editable in its other fields."""
    _, secret = create_management_token(name="operator", scope="write")
    operator = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    key = _post(operator, "/api/v1/keys", {"org": "orga", "agent": "bot", "priority": "interactive"}).json()
    assert _patch(orga, f"/api/v1/keys/{key['id']}", {"priority": "interactive", "note": "x"}).status_code == 200


AGENT_REFUSED = [
    ({"budget": {"usd": 2, "period": "month"}}, "budget"),
    ({"limits": {"rpm": 50}}, "limits"),
    ({"priority": "interactive"}, "priority"),
    ({"default_model": "pricey-a"}, "default_model"),
    ({"default_model": "best"}, "default_model"),
]
AGENT_ACCEPTED = [
    {"budget": {"usd": 1, "period": "day"}},
    {"limits": {"rpm": 5}},
    {"priority": "batch"},
    {"default_model": "fast"},
    {"side_effects": True},
]


@pytest.mark.parametrize(("fields", "param"), AGENT_REFUSED, ids=[str(f) for f, _ in AGENT_REFUSED])
def test_an_agent_gets_no_more_than_its_org_has(orga, fields, param):
    created = _post(orga, "/api/v1/orgs/orga/agents", {"name": "new", **fields})
    assert created.status_code == 403 and created.json()["error"]["param"] == param
    assert not Agent.objects.filter(name="new").exists()
    changed = _patch(orga, "/api/v1/orgs/orga/agents/bot", fields)
    assert changed.status_code == 403 and changed.json()["error"]["code"] == "forbidden"
    assert orga.get("/api/v1/orgs/orga/agents/bot").json()[param] in (None, False)


@pytest.mark.parametrize("fields", AGENT_ACCEPTED, ids=[str(f) for f in AGENT_ACCEPTED])
def test_the_same_token_creates_and_changes_agents_within_the_org(orga, fields):
    created = _post(orga, "/api/v1/orgs/orga/agents", {"name": "new", **fields})
    assert created.status_code == 201, created.content
    assert _patch(orga, "/api/v1/orgs/orga/agents/bot", fields).status_code == 200


# Expiry -------------------------------------------------------------------------------------------------------


def test_an_expired_token_is_refused_like_an_unknown_one():
    import_document(DOC)
    now = timezone.now()
    _, soon = create_management_token(name="soon", scope="read", expires_at=now + dt.timedelta(hours=1))
    _, gone = create_management_token(name="gone", scope="read", expires_at=now - dt.timedelta(seconds=1))
    assert Client(HTTP_AUTHORIZATION=f"Bearer {soon}").get("/api/v1/keys").status_code == 200
    expired = Client(HTTP_AUTHORIZATION=f"Bearer {gone}").get("/api/v1/keys")
    unknown = Client(HTTP_AUTHORIZATION="Bearer sbm-nobody").get("/api/v1/keys")
    assert expired.status_code == unknown.status_code == 401
    assert expired.json() == unknown.json()
    assert expired.json()["error"]["code"] == "invalid_management_token"


def test_create_management_token_takes_an_expiry_in_or_at():
    import_document(DOC)
    before = timezone.now()
    call_command("create_management_token", "--name", "a", "--expires-in", "12h", stdout=io.StringIO())
    call_command("create_management_token", "--name", "b", "--expires-at", "2031-01-31T12:00:00Z", stdout=io.StringIO())
    out = io.StringIO()
    call_command("create_management_token", "--name", "c", stdout=out)
    a, b, c = (ManagementToken.objects.get(name=n) for n in "abc")
    assert before + dt.timedelta(hours=12) <= a.expires_at <= timezone.now() + dt.timedelta(hours=12)
    assert b.expires_at == dt.datetime(2031, 1, 31, 12, tzinfo=dt.UTC)
    assert c.expires_at is None and "never expires" in out.getvalue()
    for bad in (
        ["--expires-in", "12 parsecs"],
        ["--expires-in", "9999999d"],
        ["--expires-at", "2001-01-01T00:00:00Z"],
        ["--expires-at", "soon"],
    ):
        with pytest.raises(CommandError):
            call_command("create_management_token", "--name", "d", *bad, stdout=io.StringIO())
    assert not ManagementToken.objects.filter(name="d").exists()


def test_a_superuser_sets_a_tokens_expiry_in_the_admin(admin_client):
    import_document(DOC)
    added = admin_client.post(
        "/admin/policies/managementtoken/add/",
        {"name": "portal", "scope": "read", "org": "", "expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"},
    )
    assert added.status_code == 302, added.content
    secret = admin_client.get(added["Location"]).context["plaintext"]
    assert ManagementToken.objects.get().expires_at.year == 2001
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/keys").status_code == 401


# The admin: staff who may not manage the org follow the same rule ------------------------------------------------


@pytest.fixture
def keymaker(django_user_model):
    user = django_user_model.objects.create_user("km", password="pw-km-123", is_staff=True)
    for codename in ("add_apikey", "change_apikey", "view_apikey", "view_agent"):
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="policies"))
    return user


def _admin_key_form(agent: Agent, **fields) -> dict:
    form = {"agent": agent.pk, "label": "k", "note": "", "enabled": "on", "metadata": "{}", "priority": ""}
    form.update(
        {"limits_rpm": "", "limits_tpm": "", "budget_usd": "", "budget_period": "month", "allowed_models": "null"}
    )
    form.update(fields)
    return form


def test_staff_who_do_not_manage_the_org_add_keys_within_its_bounds_in_the_admin(client, keymaker):
    import_document(DOC)
    agent = Agent.objects.get(org__name="orga", name="bot")
    client.force_login(keymaker)
    refused = client.post("/admin/policies/apikey/add/", _admin_key_form(agent, priority="interactive"))
    assert refused.status_code == 200 and "above org" in refused.content.decode()
    assert not ApiKey.objects.exists()
    accepted = client.post("/admin/policies/apikey/add/", _admin_key_form(agent, priority="batch"))
    assert accepted.status_code == 302, accepted.content.decode()[-2000:]
    keymaker.user_permissions.add(Permission.objects.get(codename="change_org", content_type__app_label="policies"))
    from django.contrib.auth import get_user_model

    manager = get_user_model().objects.get(pk=keymaker.pk)  # a fresh user: permissions are cached per object
    client.force_login(manager)
    assert client.post("/admin/policies/apikey/add/", _admin_key_form(agent, priority="interactive")).status_code == 302


def test_staff_who_do_not_manage_the_org_add_agents_within_its_bounds_in_the_admin(client, django_user_model):
    import_document(DOC)
    staff = django_user_model.objects.create_user("ag", password="pw-ag-123", is_staff=True)
    for codename in ("add_agent", "change_agent", "view_agent", "view_org"):
        staff.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="policies"))
    client.force_login(staff)
    orga = Org.objects.get(name="orga")
    form = {
        "org": orga.pk,
        "name": "new",
        "default_model": "",
        "priority": "",
        "budget_usd": "",
        "budget_period": "month",
    }
    refused = client.post("/admin/policies/agent/add/", {**form, "limits_rpm": "50", "limits_tpm": ""})
    assert refused.status_code == 200 and "above org" in refused.content.decode()
    assert not Agent.objects.filter(name="new").exists()
    accepted = client.post("/admin/policies/agent/add/", {**form, "limits_rpm": "5", "limits_tpm": ""})
    assert accepted.status_code == 302, accepted.content.decode()[-2000:]
    assert Agent.objects.get(name="new").limits == {"rpm": 5}


# The playground -------------------------------------------------------------------------------------------------


def test_the_playground_mints_keys_only_for_orgs_its_user_manages(client, keymaker, admin_client):
    import_document(DOC)
    orga_bot = Agent.objects.get(org__name="orga", name="bot")
    client.force_login(keymaker)  # may add API keys, manages no org
    page = client.get("/dashboard/playground/").content.decode()
    assert "orga / bot" not in page and "policies.change_org" in page
    refused = client.post("/dashboard/playground/key/", {"agent": orga_bot.pk})
    assert refused.status_code == 403 and "policies.change_org" in refused.json()["error"]
    assert not ApiKey.objects.exists()
    keymaker.user_permissions.add(Permission.objects.get(codename="change_org", content_type__app_label="policies"))
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(pk=keymaker.pk))
    assert "orga / bot" in client.get("/dashboard/playground/").content.decode()
    assert client.post("/dashboard/playground/key/", {"agent": orga_bot.pk}).status_code == 200
    superuser_page = admin_client.get("/dashboard/playground/").content.decode()
    assert "orga / bot" in superuser_page and "other / bot" in superuser_page
