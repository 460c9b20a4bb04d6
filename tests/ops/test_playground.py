"""The playground's server side (docs/dashboard.md#playground): who may use it, the keys it mints, the record it shows.

The page itself, a streamed chat through a real gateway, is tests/e2e/test_screens_browser.py.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from policies.keys import hash_key
from policies.models import Agent, ApiKey, Org
from routing.ops.dashboard.playground import PLAYGROUND, PLAYGROUND_KEY_TTL

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent():
    return Agent.objects.create(org=Org.objects.create(name="acme"), name="bot")


@pytest.fixture
def keymaker(django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("pg-staff", password="pw-pg-123", is_staff=True)
    for codename in ("add_apikey", "change_org"):  # mints keys, for the orgs it manages (all: model-wide)
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="policies"))
    return user


def test_anonymous_goes_to_login_and_staff_without_the_permission_get_403_naming_it(client, viewer_user, agent):
    assert client.get("/dashboard/playground/").status_code == 302
    client.force_login(viewer_user)
    for answer in (
        client.get("/dashboard/playground/"),
        client.post("/dashboard/playground/key/", {"agent": agent.pk}),
    ):
        assert answer.status_code == 403 and PLAYGROUND in answer.content.decode()
    assert not ApiKey.objects.exists()


def test_the_page_lists_every_agent_and_calls_the_gateway_api(client, keymaker, agent):
    client.force_login(keymaker)
    page = client.get("/dashboard/playground/").content.decode()
    assert f'<option value="{agent.pk}">acme / bot</option>' in page
    assert '"/v1/chat/completions"' in page and '"/v1/models"' in page


def test_a_minted_key_serves_its_agent_expires_soon_and_is_never_stored_in_clear(client, keymaker, agent):
    client.force_login(keymaker)
    before = timezone.now()
    answer = client.post("/dashboard/playground/key/", {"agent": agent.pk})
    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    data = answer.json()
    key = ApiKey.objects.get()
    assert key.agent == agent and key.key_hash == hash_key(data["key"]) and data["prefix"] == key.prefix
    assert key.label == "playground: pg-staff"
    assert before + PLAYGROUND_KEY_TTL <= key.expires_at <= timezone.now() + PLAYGROUND_KEY_TTL
    assert data["key"] not in str(ApiKey.objects.values().get())


def test_an_unknown_agent_is_a_400_that_says_what_to_do(client, keymaker, agent):
    client.force_login(keymaker)
    for value in ("999999", "", "x"):
        answer = client.post("/dashboard/playground/key/", {"agent": value})
        assert answer.status_code == 400 and "pick one from the list" in answer.json()["error"]
    assert client.get("/dashboard/playground/key/").status_code == 405


def _record(request_id: str, prefix: str):
    from routing.models import UsageRecord

    return UsageRecord.objects.create(
        request_id=request_id,
        created_at=timezone.now() - timedelta(seconds=1),
        endpoint="chat",
        org="acme",
        agent="bot",
        key_prefix=prefix,
        model_used="op-chat-b",
        provider="op-b",
        status=200,
        attempts=2,
        fallback_reason="upstream_5xx",
        prompt_tokens=12,
        completion_tokens=5,
        cost="0.00001900",
        latency_ms=3.25,
        trail=[["op-chat", "upstream_5xx"], ["op-chat-b", "ok"]],
        request_body="secret prompt",
    )


def test_the_record_of_a_minted_key_shows_cost_and_trail_but_not_bodies(client, keymaker, agent, snapshot):
    client.force_login(keymaker)
    prefix = client.post("/dashboard/playground/key/", {"agent": agent.pk}).json()["prefix"]
    assert client.get("/dashboard/playground/record/pg-1/").status_code == 404  # not written yet
    _record("pg-1", prefix)
    data = client.get("/dashboard/playground/record/pg-1/").json()
    assert data["cost_usd"] == "0.00001900" and data["prompt_tokens"] == 12 and data["attempts"] == 2
    assert [(h["model"], h["provider"], h["served"]) for h in data["trail"]] == [
        ("op-chat", "op-a", False),
        ("op-chat-b", "op-b", True),
    ]
    assert "secret prompt" not in str(data)


def test_records_of_other_keys_need_the_usage_permission(client, keymaker, agent):
    client.force_login(keymaker)
    _record("other-1", "sb-other00")
    assert client.get("/dashboard/playground/record/other-1/").status_code == 403


def test_minting_a_key_needs_the_csrf_token_of_the_page(keymaker, agent):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(keymaker)
    assert client.post("/dashboard/playground/key/", {"agent": agent.pk}).status_code == 403
    page = client.get("/dashboard/playground/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    answer = client.post("/dashboard/playground/key/", {"agent": agent.pk}, headers={"X-CSRFToken": token})
    assert answer.status_code == 200 and ApiKey.objects.count() == 1
