"""The admin validates with the same rules and messages, saves nothing on error, and never shows secrets."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies.keys import hash_key
from policies.models import Agent, ApiKey, Org, OrgCredential, OrgPolicy
from providers.models import Alias, Model, Provider
from routing.config.store import dump_yaml, export_document
from routing.models import ResilienceSettings
from tests.config.admin_helpers import page_data, set_rows, text

pytestmark = pytest.mark.django_db


def change_url(obj):
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def add_url(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")


def pk(model_id):
    return Model.objects.get(public_id=model_id).pk


def spare_models(n=9):
    provider = Provider.objects.get()
    return [
        Model.objects.create(public_id=f"spare-{i}", provider=provider, upstream_model="x", capabilities=["chat"]).pk
        for i in range(n)
    ]


def policy_0():
    return OrgPolicy.objects.get(priority=10)


def _setter(**values):
    def mutate(data):
        data.update(values)

    return mutate


def _chat_a_chain(targets):
    return lambda data: set_rows(
        data, "fallback_links", [{"position": i, "target": t(), "model": pk("chat-a")} for i, t in enumerate(targets)]
    )


def _chat_a_caps(caps):
    return lambda data: data.update(capabilities=caps)


def _policy(index, **values):
    return lambda data: data.update({f"policies-{index}-{k}": v for k, v in values.items()})


def _new_resilience_data(**values):
    def mutate(data):
        data.update(values)

    return mutate


# fmt: off
ADMIN_CASES = [
    # (id, object to edit (None: the add view of the model), mutate POST data, fragment)
    ("provider-base-url", lambda: Provider.objects.get(), _setter(base_url="ftp://example.com"), "is not an http(s) URL"),
    ("provider-timeout", lambda: Provider.objects.get(), _setter(connect_timeout_ms="0"), "positive whole number of milliseconds"),
    ("provider-env-name", lambda: Provider.objects.get(), _setter(api_key_env="sk-live 123"), "never the key itself"),
    ("model-timeout", lambda: Model.objects.get(public_id="chat-a"), _setter(total_timeout_ms="0"), "positive whole number of milliseconds"),
    ("self-fallback", lambda: Model.objects.get(public_id="chat-a"), _chat_a_chain([lambda: pk("chat-b"), lambda: pk("chat-a")]), "lists itself as a fallback"),
    ("duplicate-link", lambda: Model.objects.get(public_id="chat-a"), _chat_a_chain([lambda: pk("chat-b"), lambda: pk("chat-b")]), "appears twice"),
    ("capability-mismatch", lambda: Model.objects.get(public_id="chat-a"), _chat_a_caps(["chat", "embeddings"]), "'chat-b' does not serve embeddings"),
    ("mismatch-caused-elsewhere", lambda: Model.objects.get(public_id="chat-b"), _chat_a_caps(["embeddings"]), "This change would break models[chat-a].fallbacks[0]"),
    ("alias-collision", lambda: Alias, lambda data: data.update(name="chat-b", target=pk("chat-a")), "same name as a model id"),
    ("model-id-collides-with-alias", lambda: Model.objects.get(public_id="chat-b"), _setter(public_id="fast"), "This change would break aliases[fast]"),
    ("malformed-pattern", lambda: Org.objects.get(), _policy(0, pattern="chat-["), "malformed pattern 'chat-[': unterminated character class"),
    ("policy-action-deny-with-chain", lambda: Org.objects.get(), _policy(1, fallback_chain='["chat-b"]'), "deny policy with a fallback_chain"),
    ("policy-chain-unknown", lambda: Org.objects.get(), _policy(0, fallback_chain='["chat-z"]'), "unknown model 'chat-z'"),
    ("policy-chain-alias", lambda: Org.objects.get(), _policy(0, fallback_chain='["fast"]'), "use 'chat-a'"),
    ("agent-default-model", lambda: Org.objects.get(), lambda data: data.update({"agents-0-default_model": "chat-z"}), "neither a model id nor an alias"),
    ("credential-base-url", lambda: Org.objects.get(), lambda data: set_rows(data, "credentials", [{"provider": Provider.objects.get().pk, "base_url": "localhost:9005"}]), "is not an http(s) URL"),
    ("credential-env-name", lambda: Org.objects.get(), lambda data: set_rows(data, "credentials", [{"provider": Provider.objects.get().pk, "api_key_env": "has space"}]), "not an environment variable name"),
    ("model-cache-ttl", lambda: Model.objects.get(public_id="chat-a"), _setter(cache_ttl_s="0"), "cache_ttl_s of model 'chat-a' must be a positive whole number of seconds"),
    ("org-limits-zero", lambda: Org.objects.get(), _setter(limits_rpm="0"), "rpm of org 'acme' must be a positive whole number"),
    ("org-limits-fraction", lambda: Org.objects.get(), _setter(limits_tpm="2.5"), "tpm of org 'acme' must be a positive whole number of tokens per minute, got 2.5"),
    ("agent-limits-inline", lambda: Org.objects.get(), lambda data: data.update({"agents-0-limits_tpm": "-3"}), "tpm of agent 'support-bot'"),
    ("standalone-agent-limits", lambda: Agent.objects.get(), _setter(limits_rpm="many"), "positive whole number of requests per minute, got 'many'"),
    ("org-budget-period", lambda: Org.objects.get(), _setter(budget_usd="10", budget_period="week"), "unknown budget period 'week' of org 'acme'"),
    ("agent-budget-inline", lambda: Org.objects.get(), lambda data: data.update({"agents-0-budget_usd": "-1", "agents-0-budget_period": "day"}), "usd of the budget of agent 'support-bot'"),
    ("standalone-policy-pattern", policy_0, _setter(pattern="["), "malformed pattern '['"),
    ("standalone-policy-chain", policy_0, _setter(fallback_chain='["nope"]'), "unknown model 'nope'"),
    ("standalone-agent-default", lambda: Agent.objects.get(), _setter(default_model="nope"), "neither a model id nor an alias"),
    ("standalone-credential-url", lambda: OrgCredential, lambda data: data.update(org=Org.objects.get().pk, provider=Provider.objects.get().pk, base_url="gopher://x"), "is not an http(s) URL"),
    ("resilience-ratio", lambda: ResilienceSettings, _new_resilience_data(retry_budget_ratio="1.5"), "between 0 and 1"),
    ("resilience-cooldown", lambda: ResilienceSettings, _new_resilience_data(breaker_cooldown_s="0"), "positive number of seconds"),
    ("resilience-timeout", lambda: ResilienceSettings, _new_resilience_data(total_timeout_ms="0"), "positive whole number of milliseconds"),
]
# fmt: on


@pytest.mark.parametrize(("case", "target", "mutate", "fragment"), ADMIN_CASES, ids=[c[0] for c in ADMIN_CASES])
def test_admin_shows_the_rule_error_and_saves_nothing(admin_client_, imported, case, target, mutate, fragment):
    obj = target()
    url = add_url(obj) if isinstance(obj, type) else change_url(obj)
    data = page_data(admin_client_.get(url))
    mutate(data)
    before = dump_yaml(export_document())
    response = admin_client_.post(url, data)
    assert response.status_code == 200, "the form should be shown again with errors"
    assert fragment in text(response)
    assert dump_yaml(export_document()) == before


def test_chain_longer_than_eight_in_the_inline(admin_client_, imported):
    spares = spare_models()
    url = change_url(Model.objects.get(public_id="chat-a"))
    data = page_data(admin_client_.get(url))
    set_rows(data, "fallback_links", [{"position": i, "target": p} for i, p in enumerate(spares)])
    response = admin_client_.post(url, data)
    assert response.status_code == 200 and "has 9 links; at most 8 are allowed" in text(response)
    assert Model.objects.get(public_id="chat-a").fallback_links.count() == 1


def test_valid_edits_save_and_reorder_the_chain(admin_client_, imported):
    spare = spare_models(1)[0]
    url = change_url(Model.objects.get(public_id="chat-a"))
    data = page_data(admin_client_.get(url))
    set_rows(data, "fallback_links", [{"position": 5, "target": pk("chat-b")}, {"position": 1, "target": spare}])
    data["capabilities"] = ["chat", "vision"]
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:3000]
    chat_a = export_document()["models"][0]
    assert chat_a["fallbacks"] == ["spare-0", "chat-b"] and chat_a["capabilities"] == ["chat", "vision"]


def test_fixing_the_org_inline_and_saving_works(admin_client_, imported):
    url = change_url(Org.objects.get())
    data = page_data(admin_client_.get(url))
    data["policies-0-pattern"] = "gpt-[45]*"
    data["agents-0-default_model"] = "chat-b"
    assert admin_client_.post(url, data).status_code == 302
    assert OrgPolicy.objects.filter(pattern="gpt-[45]*").exists() and Agent.objects.get().default_model == "chat-b"


def test_renaming_a_model_in_the_admin_follows_foreign_keys(admin_client_, imported):
    url = change_url(Model.objects.get(public_id="chat-b"))
    data = page_data(admin_client_.get(url))
    data["public_id"] = "chat-b2"
    response = admin_client_.post(url, data)
    # the policy's fallback_chain names chat-b by id: the rename would break it
    assert response.status_code == 200 and "This change would break orgs[acme].policies[0].fallback_chain[0]" in text(
        response
    )


def test_existing_problems_elsewhere_do_not_block_unrelated_saves(admin_client_, imported):
    OrgPolicy.objects.filter(priority=10).update(pattern="[")
    url = change_url(Provider.objects.get())
    data = page_data(admin_client_.get(url))
    data["base_url"] = "http://127.0.0.1:9999/v1"
    assert admin_client_.post(url, data).status_code == 302


def test_resilience_settings_is_a_singleton(admin_client_, imported):
    data = page_data(admin_client_.get(add_url(ResilienceSettings)))
    data["max_retries"] = "3"
    assert admin_client_.post(add_url(ResilienceSettings), data).status_code == 302
    assert ResilienceSettings.objects.get().pk == 1
    assert admin_client_.get(add_url(ResilienceSettings)).status_code == 403
    assert admin_client_.get(reverse("admin:routing_resiliencesettings_delete", args=[1])).status_code == 403
    assert admin_client_.get(reverse("admin:routing_resiliencesettings_changelist")).url.endswith("/1/change/")


def test_admin_api_key_is_shown_once_and_only_its_hash_is_kept(admin_client_, imported):
    agent = Agent.objects.get()
    response = admin_client_.post(add_url(ApiKey), {"agent": agent.pk, "label": "laptop", "note": "CI runner"})
    row = ApiKey.objects.get()
    created = reverse("admin:policies_apikey_created", args=[row.pk])
    assert response.status_code == 302 and response["Location"] == created  # redirect after POST

    shown = admin_client_.get(created)
    assert shown.status_code == 200 and "no-store" in shown["Cache-Control"]
    key = shown.context["plaintext"]
    assert key in text(shown) and key.startswith("sb-") and "won't be shown again" in text(shown)
    assert row.key_hash == hash_key(key) and row.label == "laptop" and row.note == "CI runner"

    reloaded = admin_client_.get(created)  # the browser's reload: a GET, which creates nothing
    assert reloaded.status_code == 200 and key not in text(reloaded) and "not shown again" in text(reloaded)
    assert ApiKey.objects.count() == 1
    for url in (change_url(row), reverse("admin:policies_apikey_changelist")):
        page = text(admin_client_.get(url))
        assert key not in page and row.key_hash not in page and row.prefix in page
    assert ApiKey.objects.count() == 1


def test_admin_api_key_with_expiry_and_the_change_page_revoke_button(admin_client_, imported, saved_signals):
    agent = Agent.objects.get()
    admin_client_.post(
        add_url(ApiKey), {"agent": agent.pk, "label": "temp", "expires_at_0": "2031-01-02", "expires_at_1": "10:00:00"}
    )
    row = ApiKey.objects.get()
    assert row.expires_at is not None and row.expires_at.year == 2031
    page = text(admin_client_.get(change_url(row)))
    revoke = reverse("admin:policies_apikey_revoke", args=[row.pk])
    assert revoke in page and "Revoke this key" in page
    assert admin_client_.get(revoke).status_code == 302 and not ApiKey.objects.get().revoked  # GET revokes nothing
    saved_signals.clear()
    response = admin_client_.post(revoke, follow=True)
    assert ApiKey.objects.get().revoked and saved_signals.count(("save", "ApiKey")) == 1
    assert "Revoked 1 key(s)" in text(response) and "Revoke this key" not in text(response)


def test_revoke_action(admin_client_, imported, saved_signals):
    from policies.keys import create_api_key

    keys = [create_api_key(agent=Agent.objects.get())[0] for _ in range(2)]
    saved_signals.clear()
    admin_client_.post(
        reverse("admin:policies_apikey_changelist"), {"action": "revoke_keys", "_selected_action": [k.pk for k in keys]}
    )
    assert list(ApiKey.objects.values_list("revoked", flat=True)) == [True, True]
    assert saved_signals.count(("save", "ApiKey")) == 2


def test_secret_values_never_appear_in_admin_pages(admin_client_, imported, monkeypatch):
    secret = "sk-live-DO-NOT-SHOW-4242"
    monkeypatch.setenv("SWITCHBOARD_UPSTREAM_LOCAL_A", secret)
    monkeypatch.setenv("SWITCHBOARD_UPSTREAM_ACME", secret)
    OrgCredential.objects.create(
        org=Org.objects.get(), provider=Provider.objects.get(), api_key_env="SWITCHBOARD_UPSTREAM_ACME"
    )
    urls = [
        reverse("admin:providers_provider_changelist"),
        change_url(Provider.objects.get()),
        change_url(Org.objects.get()),
        reverse("admin:policies_orgcredential_changelist"),
    ]
    for url in urls:
        page = text(admin_client_.get(url))
        assert "SWITCHBOARD_UPSTREAM_LOCAL_A" in page or "SWITCHBOARD_UPSTREAM_ACME" in page
        assert secret not in page


def test_admin_pages_render(admin_client_, imported):
    for name in (
        "providers_model",
        "providers_alias",
        "policies_agent",
        "policies_orgpolicy",
        "policies_apikey",
        "routing_usagerecord",
        "routing_breakeraction",
    ):
        assert admin_client_.get(reverse(f"admin:{name}_changelist")).status_code == 200
    assert admin_client_.get(add_url(Model)).status_code == 200
    assert admin_client_.get(reverse("admin:routing_usagerecord_add")).status_code == 403


def _post(client, url, mutate):
    data = page_data(client.get(url))
    mutate(data)
    return client.post(url, data)


def test_errors_land_on_the_field_they_are_about(admin_client_, imported):
    chat_a = change_url(Model.objects.get(public_id="chat-a"))
    response = _post(admin_client_, chat_a, _chat_a_chain([lambda: pk("chat-b"), lambda: pk("chat-a")]))
    links = response.context["inline_admin_formsets"][0].formset
    assert "lists itself" in links.forms[1].errors["target"][0] and not links.forms[0].errors

    response = _post(
        admin_client_,
        change_url(Org.objects.get()),
        lambda d: d.update({"agents-0-default_model": "nope", "policies-1-fallback_chain": "[]"}),
    )
    agents, policies, _ = (inline.formset for inline in response.context["inline_admin_formsets"])
    assert "neither a model id nor an alias" in agents.forms[0].errors["default_model"][0]
    assert "deny policy" in policies.forms[1].errors["fallback_chain"][0]

    response = _post(admin_client_, add_url(ResilienceSettings), lambda d: d.update(breaker_cooldown_s="0"))
    assert "positive number of seconds" in response.context["adminform"].form.errors["breaker_cooldown_s"][0]

    response = _post(admin_client_, change_url(Model.objects.get(public_id="chat-b")), _chat_a_caps(["embeddings"]))
    assert "would break models[chat-a].fallbacks[0]" in response.context["adminform"].form.non_field_errors()[0]


def test_adding_a_model_with_its_chain(admin_client_, imported):
    url = add_url(Model)
    data = page_data(admin_client_.get(url))
    data.update(
        public_id="embed-a", provider=Provider.objects.get().pk, upstream_model="e5", capabilities=["embeddings"]
    )
    set_rows(data, "fallback_links", [{"position": 0, "target": pk("chat-b")}])
    response = admin_client_.post(url, data)
    assert response.status_code == 200 and "'chat-b' does not serve embeddings, which model 'embed-a' serves" in text(
        response
    )
    assert not Model.objects.filter(public_id="embed-a").exists()
    data["capabilities"] = ["chat"]
    assert admin_client_.post(url, data).status_code == 302
    assert next(m for m in export_document()["models"] if m["id"] == "embed-a")["fallbacks"] == ["chat-b"]


def test_adding_an_org_with_inlines(admin_client_, imported):
    url = add_url(Org)
    data = page_data(admin_client_.get(url))
    data.update(name="beta", default_action="deny")
    set_rows(data, "policies", [{"pattern": "chat-[", "action": "allow", "priority": 1}])
    response = admin_client_.post(url, data)
    assert (
        response.status_code == 200
        and "malformed pattern" in text(response)
        and not Org.objects.filter(name="beta").exists()
    )
    set_rows(data, "policies", [{"pattern": "chat-*", "action": "allow", "priority": 1, "fallback_chain": "[]"}])
    set_rows(data, "agents", [{"name": "bot", "default_model": "fast"}])
    assert admin_client_.post(url, data).status_code == 302
    beta = next(o for o in export_document()["orgs"] if o["name"] == "beta")
    assert beta["policies"] == [{"pattern": "chat-*", "action": "allow", "priority": 1, "fallback_chain": []}]


@pytest.mark.parametrize(
    ("target", "broken"),
    [
        (lambda: Alias.objects.get(), "orgs[acme].agents[support-bot].default_model"),
        (lambda: Model.objects.get(public_id="chat-a"), "orgs[acme].agents[support-bot].default_model"),
    ],
    ids=["alias-used-by-agent", "model-behind-that-alias"],
)
def test_deletions_that_would_break_the_configuration_are_refused(admin_client_, imported, target, broken):
    obj = target()
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_delete", args=[obj.pk])
    assert f"This deletion would break {broken}" in text(admin_client_.get(url))
    admin_client_.post(url, {"post": "yes"})
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_harmless_deletion_goes_through(admin_client_, imported):
    spare = Model.objects.get(pk=spare_models(1)[0])
    url = reverse("admin:providers_model_delete", args=[spare.pk])
    assert admin_client_.post(url, {"post": "yes"}).status_code == 302
    assert not Model.objects.filter(pk=spare.pk).exists()


def test_admin_api_key_controls_are_saved_validated_and_reach_the_snapshot(admin_client_, imported):
    from routing.config.document import key_rows_from_db

    agent = Agent.objects.get()
    controls = {
        "enabled": "on",
        "limits_rpm": "10",
        "limits_tpm": "",
        "budget_usd": "0.5",
        "budget_period": "day",
        "allowed_models": '["fast", "gpt-*"]',
        "metadata": '{"team": "search"}',
    }
    response = admin_client_.post(add_url(ApiKey), {"agent": agent.pk, "label": "search", **controls})
    assert response.status_code == 302
    row = ApiKey.objects.get()
    assert (row.limits, row.budget, row.allowed_models) == (
        {"rpm": 10},
        {"usd": 0.5, "period": "day"},
        ["fast", "gpt-*"],
    )
    assert row.metadata == {"team": "search"} and row.enabled
    [snap_row] = key_rows_from_db()
    assert snap_row["limits"] == {"rpm": 10} and snap_row["models"] == ["fast", "gpt-*"]
    page = text(admin_client_.get(change_url(row)))
    assert "gpt-*" in page and "search" in page

    bad = admin_client_.post(
        change_url(row), {"label": "search", "limits_rpm": "0", "allowed_models": '["[a-"]', "budget_usd": ""}
    )
    assert bad.status_code == 200  # the form again, with the one validation's messages
    assert "rpm of the API key must be a positive whole number" in text(bad) and "malformed pattern" in text(bad)
    assert ApiKey.objects.get().limits == {"rpm": 10}
