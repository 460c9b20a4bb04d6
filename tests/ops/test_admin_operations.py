"""Operator tools in the admin: explain a route, and breaker controls as admin actions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from providers.models import Model, Provider
from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.core.breaker import State
from routing.models import BreakerAction
from routing.runtime.process import current

DOC = {
    "providers": [{"name": "adm-p", "dialect": "openai", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [
        {
            "id": "adm-big",
            "provider": "adm-p",
            "upstream_model": "b",
            "capabilities": ["chat"],
            "context_window": 100000,
        },
        {
            "id": "adm-a",
            "provider": "adm-p",
            "upstream_model": "a",
            "capabilities": ["chat"],
            "context_window": 50,
            "fallbacks": ["vendor/x", "adm-big"],
        },
        {"id": "vendor/x", "provider": "adm-p", "upstream_model": "x", "capabilities": ["chat"]},
    ],
    "orgs": [{"name": "adm-org", "policies": [{"pattern": "vendor/*", "action": "deny", "priority": 1}]}],
}


@pytest.fixture
def served():
    previous = live.current()
    live.swap(build_snapshot(DOC, [], {}, version=99, config_version=42))
    yield live.current()
    live.swap(previous)


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("adm-op", password="pw-adm-123")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_explain_route_page_shows_the_policy_and_each_link_kept_or_skipped(staff_client, served):
    response = staff_client.get(
        "/admin/explain-route/", {"org": "adm-org", "model": "adm-a", "kind": "chat", "tokens": 500}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "(version 42)" in html and "(version 99)" not in html  # the configuration version, not the reload counter
    assert 'data-model="adm-a" data-kept="false"' in html  # 500 tokens > its 50-token window
    assert "skipped: context_length" in html
    assert 'data-model="vendor/x" data-kept="false"' in html and "skipped: model_denied" in html
    assert 'data-model="adm-big" data-kept="true"' in html


@pytest.mark.django_db
def test_explain_route_page_is_staff_only(client, served):
    response = client.get("/admin/explain-route/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_the_admin_index_links_every_admin_page_of_the_table(staff_client, served, monkeypatch):
    from routing.ops import admin_views

    extra = admin_views.Page("explain-route/", "explain-route", "Another page", "Listed from its row", lambda r: None)
    monkeypatch.setattr(admin_views, "PAGES", (*admin_views.PAGES, extra))
    html = staff_client.get("/admin/").content.decode()
    assert 'id="explain-route-link" href="/admin/explain-route/">Explain a route</a>' in html
    assert ">Another page</a>" in html and "Listed from its row" in html


@pytest.mark.django_db
def test_admin_actions_force_open_then_reset_a_breaker_and_log_who(staff_client, served):
    provider = Provider.objects.create(name="adm-p", dialect="openai", base_url="http://127.0.0.1:9/v1")
    model = Model.objects.create(public_id="adm-big", provider=provider, upstream_model="b", capabilities=["chat"])
    key = ("adm-p", "adm-big")
    current().breakers.reset(key)

    changelist = "/admin/providers/model/"
    response = staff_client.post(
        changelist, {"action": "force_open_breakers", "_selected_action": [model.pk]}, follow=True
    )
    assert "forced open for 30 minutes" in response.content.decode()
    assert current().breakers.state(key) is State.OPEN
    assert not current().breakers.admit(key).allowed

    staff_client.post(changelist, {"action": "reset_breakers", "_selected_action": [model.pk]}, follow=True)
    assert current().breakers.state(key) is State.CLOSED
    actions = list(BreakerAction.objects.order_by("created_at").values_list("action", "user", "model"))
    assert actions == [("force_open", "adm-op", "adm-big"), ("reset", "adm-op", "adm-big")]


@pytest.mark.django_db
def test_admin_breaker_action_on_a_model_the_server_does_not_serve_says_so(staff_client, served):
    provider = Provider.objects.create(name="other-p", dialect="openai", base_url="http://127.0.0.1:9/v1")
    model = Model.objects.create(public_id="not-served", provider=provider, upstream_model="n", capabilities=["chat"])
    response = staff_client.post(
        "/admin/providers/model/", {"action": "reset_breakers", "_selected_action": [model.pk]}, follow=True
    )
    assert "no configured link other-p/not-served" in response.content.decode()
    assert not BreakerAction.objects.exists()


@pytest.mark.django_db
def test_admin_breaker_actions_need_the_control_permission(client, django_user_model, served):
    from routing.ops.controls import ensure_operators_group

    provider = Provider.objects.create(name="adm-p", dialect="openai", base_url="http://127.0.0.1:9/v1")
    model = Model.objects.create(public_id="adm-big", provider=provider, upstream_model="b", capabilities=["chat"])
    key = ("adm-p", "adm-big")
    current().breakers.reset(key)
    user = django_user_model.objects.create_user("adm-viewer", password="pw-viewer-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_model", "change_model"]))
    client.force_login(user)
    changelist = "/admin/providers/model/"
    assert "force_open_breakers" not in client.get(changelist).content.decode()  # not offered
    response = client.post(changelist, {"action": "force_open_breakers", "_selected_action": [model.pk]}, follow=True)
    assert response.status_code == 200 and "forced open" not in response.content.decode()
    assert current().breakers.state(key) is State.CLOSED
    assert not BreakerAction.objects.exists()

    user.groups.add(ensure_operators_group())
    user = django_user_model.objects.get(pk=user.pk)  # fresh permission cache
    client.force_login(user)
    assert "force_open_breakers" in client.get(changelist).content.decode()
    client.post(changelist, {"action": "force_open_breakers", "_selected_action": [model.pk]}, follow=True)
    assert current().breakers.state(key) is State.OPEN
    current().breakers.reset(key)


@pytest.mark.django_db
def test_demo_operators_group_carries_the_control_permission(django_user_model):
    from routing.ops.controls import ensure_operators_group, may_control

    user = django_user_model.objects.create_user("grp-op", password="pw-op-123", is_staff=True)
    assert not may_control(user)
    user.groups.add(ensure_operators_group())
    ensure_operators_group()  # idempotent
    assert may_control(django_user_model.objects.get(pk=user.pk))


@pytest.mark.django_db
def test_provider_list_says_how_each_is_probed_and_its_last_result(staff_client):
    from datetime import UTC, datetime

    from providers.models import ProviderProbe

    Provider.objects.create(name="pr-bg", dialect="openai", base_url="http://127.0.0.1:9/v1", health_probe_enabled=True)
    Provider.objects.create(name="pr-manual", dialect="openai", base_url="http://127.0.0.1:9/v1")
    ProviderProbe.objects.create(
        provider="pr-manual", status="down", checked_at=datetime(2026, 1, 1, 10, tzinfo=UTC), detail="HTTP 503"
    )
    html = staff_client.get("/admin/providers/provider/").content.decode()
    assert "icon-no.svg" not in html and "icon-yes.svg" not in html  # no red cross that reads as "down"
    assert "on demand only (probe_providers)" in html and ">background<" in html
    assert 'data-probe="down" title="HTTP 503"' in html and "2026-01-01T10:00:00Z" in html
    assert 'data-probe="unknown"' in html and "not probed yet" in html
