"""Model ids are chosen, not typed: the fallback chain widget (null / [] / ordered ids) and the
default-model search box on the organisation page, and the search they use."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from policies.models import Agent, Org, OrgPolicy
from providers.models import Model
from routing.config.store import export_document
from tests.config.admin_helpers import page_data

pytestmark = pytest.mark.django_db


def org_url():
    return reverse("admin:policies_org_change", args=[Org.objects.get().pk])


def chain_of(priority):
    return OrgPolicy.objects.get(priority=priority).fallback_chain


def post_chain(client, mode, ids=(), index=0):
    data = page_data(client.get(org_url()))
    for key in [k for k in data if k.startswith(f"policies-{index}-fallback_chain")]:
        del data[key]
    data[f"policies-{index}-fallback_chain_0"] = mode
    if ids:
        data[f"policies-{index}-fallback_chain_1"] = list(ids)
    return client.post(org_url(), data)


def test_org_page_never_shows_null_and_renders_the_chain_as_chosen_models(admin_client_, imported):
    html = admin_client_.get(org_url()).content.decode()
    assert "null" not in html  # the deny policy has no chain: no literal `null` in any box
    # the allow policy's chain: mode "these models" and chat-b selected in a model search box
    chain_0 = re.search(r'<select name="policies-0-fallback_chain_0".*?</select>', html, re.S).group(0)
    assert re.search(r'<option value="chain" selected>', chain_0)
    ids_0 = re.search(r'<select name="policies-0-fallback_chain_1"[^>]*>.*?</select>', html, re.S).group(0)
    assert "admin-autocomplete" in ids_0 and "multiple" in ids_0
    assert re.findall(r'<option value="([^"]+)" selected>', ids_0) == ["chat-b"]
    chain_1 = re.search(r'<select name="policies-1-fallback_chain_0".*?</select>', html, re.S).group(0)
    assert re.search(r'<option value="inherit" selected>', chain_1)  # null = keep the model's chain
    assert "admin/js/autocomplete.js" in html


def test_the_chain_widget_saves_an_ordered_chain_no_fallback_and_inherit(admin_client_, imported):
    Model.objects.create(
        public_id="chat-c", provider=Model.objects.get(public_id="chat-a").provider, upstream_model="c"
    )
    response = post_chain(admin_client_, "chain", ["chat-c", "chat-b"])
    assert response.status_code == 302, response.content.decode()[:2000]
    assert chain_of(10) == ["chat-c", "chat-b"]  # in the order picked
    assert export_document()["orgs"][0]["policies"][0]["fallback_chain"] == ["chat-c", "chat-b"]
    html = admin_client_.get(org_url()).content.decode()
    ids_0 = re.search(r'<select name="policies-0-fallback_chain_1"[^>]*>.*?</select>', html, re.S).group(0)
    assert re.findall(r'<option value="([^"]+)" selected>', ids_0) == ["chat-c", "chat-b"]

    assert post_chain(admin_client_, "none").status_code == 302
    assert chain_of(10) == []  # no fallback, distinct from...
    assert re.search(
        r'name="policies-0-fallback_chain_0".*?<option value="none" selected>',
        admin_client_.get(org_url()).content.decode(),
        re.S,
    )
    assert post_chain(admin_client_, "inherit").status_code == 302
    assert chain_of(10) is None  # ...keeping the model's own chain
    assert "fallback_chain" not in export_document()["orgs"][0]["policies"][0]


def test_the_chain_widget_refuses_an_empty_chain_and_unknown_models(admin_client_, imported):
    response = post_chain(admin_client_, "chain")
    assert response.status_code == 200 and "Pick at least one model" in response.content.decode()
    response = post_chain(admin_client_, "chain", ["chat-z"])
    assert response.status_code == 200 and "unknown model &#x27;chat-z&#x27;" in response.content.decode()
    assert chain_of(10) == ["chat-b"]


def test_default_model_is_a_model_or_alias_search_box(admin_client_, imported):
    html = admin_client_.get(org_url()).content.decode()
    box = re.search(r'<select name="agents-0-default_model"[^>]*>.*?</select>', html, re.S).group(0)
    assert "admin-autocomplete" in box and reverse("admin:switchboard_model_choices") in box
    assert re.findall(r'<option value="([^"]+)" selected>', box) == ["fast"]
    data = page_data(admin_client_.get(org_url()))
    data["agents-0-default_model"] = "chat-b"
    assert admin_client_.post(org_url(), data).status_code == 302
    assert Agent.objects.get().default_model == "chat-b"
    standalone = admin_client_.get(reverse("admin:policies_agent_change", args=[Agent.objects.get().pk]))
    assert 'class="admin-autocomplete"' in standalone.content.decode()


def test_model_search_lists_models_then_aliases_and_is_staff_only(admin_client_, imported, client):
    url = reverse("admin:switchboard_model_choices")
    found = admin_client_.get(url, {"term": "a"}).json()
    assert found == {
        "results": [
            {"id": "chat-a", "text": "chat-a"},
            {"id": "chat-b", "text": "chat-b"},
            {"id": "fast", "text": "fast (alias of chat-a)"},
        ],
        "pagination": {"more": False},
    }
    assert [r["id"] for r in admin_client_.get(url, {"term": "", "aliases": "0"}).json()["results"]] == [
        "chat-a",
        "chat-b",
    ]
    admin_client_.logout()
    assert admin_client_.get(url).status_code == 302  # to the login page
