"""The admin's typed lists and small mappings (docs/operations.md#admin-fields): a key's Models as patterns one
per line, its metadata as key=value lines, a model's dated prices as rows with their currency, its concurrency,
hedge and affinity as labelled boxes, and a new fallback row at the next position. Errors come from the one
validation, next to their field; an unchanged save changes nothing."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from policies.models import Agent, ApiKey
from providers.models import Model
from routing.config.store import dump_yaml, export_document
from routing.models import ConfigRevision, ConfigVersion
from tests.config.admin_helpers import page_data, text

pytestmark = pytest.mark.django_db

KEY_ADD = "admin:policies_apikey_add"


def _add_key(client, **fields):
    data = {"agent": Agent.objects.get().pk, "label": "k", "enabled": "on", **fields}
    return client.post(reverse(KEY_ADD), data)


def _field_errors(response, field):
    """The error messages shown in the row of `field` (the admin's `field-<name>` box)."""
    page = text(response)
    row = re.search(rf'<div class="form-row[^"]*field-{field}[^"]*">(.*?)</div>\s*</div>', page, re.S)
    assert row is not None, f"no row for {field}"
    return " ".join(re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', row.group(1), re.S))


def _model_page(client, model_id="chat-a"):
    return reverse("admin:providers_model_change", args=[Model.objects.get(public_id=model_id).pk])


@pytest.mark.parametrize("typed", ["chat-*\ngpt-4o", "chat-*, gpt-4o", " chat-*\n\ngpt-4o ,\n"])
def test_a_key_s_models_are_typed_as_patterns_one_per_line_or_comma_separated(admin_client_, imported, typed):
    response = _add_key(admin_client_, allowed_models=typed)
    assert response.status_code == 302, text(response)
    assert ApiKey.objects.get().allowed_models == ["chat-*", "gpt-4o"]


def test_blank_models_mean_every_model_the_org_allows_and_the_page_shows_no_null(admin_client_, imported):
    page = text(admin_client_.get(reverse(KEY_ADD)))
    assert re.search(r'<textarea name="allowed_models"[^>]*>\s*</textarea>', page), "the box starts empty"
    assert _add_key(admin_client_, allowed_models="", metadata="").status_code == 302
    key = ApiKey.objects.get()
    assert key.allowed_models is None and key.metadata == {}
    change = text(admin_client_.get(reverse("admin:policies_apikey_change", args=[key.pk])))
    assert "null" not in change


def test_metadata_is_typed_as_key_value_lines(admin_client_, imported):
    response = _add_key(admin_client_, metadata='team=search\ncost_centre=42\nnote=a=b\nsince="2026"')
    assert response.status_code == 302, text(response)
    assert ApiKey.objects.get().metadata == {"team": "search", "cost_centre": 42, "note": "a=b", "since": "2026"}


@pytest.mark.parametrize(
    ("field", "typed", "message"),
    [
        ("allowed_models", "chat-[", "malformed pattern 'chat-['"),
        ("metadata", "team search", "line 1 ('team search') is not key=value"),
        ("metadata", "a=1\na=2", "line 2 repeats the key 'a'"),
    ],
)
def test_a_bad_list_is_refused_on_its_field_and_nothing_is_saved(admin_client_, imported, field, typed, message):
    response = _add_key(admin_client_, **{field: typed})
    assert response.status_code == 200
    assert message in _field_errors(response, field)
    assert not ApiKey.objects.exists()


def test_a_model_s_dated_prices_are_rows_with_their_currency(admin_client_, imported):
    url = _model_page(admin_client_)
    page = admin_client_.get(url)
    body = text(page)
    assert "<th>currency</th>" in body and "<th>cache write 1h</th>" in body and 'per million tokens">USD</td>' in body
    assert re.search(r"Input price:</label>.*?US\$ per million tokens\.", body, re.S)
    data = page_data(page)
    data.update({"price_versions-0-effective_from": "2026-01-01", "price_versions-0-input": "3"})
    data.update({"price_versions-0-output": "15", "price_versions-0-cache_read": "0.3"})
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)
    versions = Model.objects.get(public_id="chat-a").price_versions
    assert versions == [{"effective_from": "2026-01-01", "input": 3, "output": 15, "cache_read": 0.3}]

    again = page_data(admin_client_.get(url))  # the saved row, and a blank one to add the next
    assert again["price_versions-0-output"] == "15" and again["price_versions-1-effective_from"] == ""
    again.update({"price_versions-1-effective_from": "2026-06-01", "price_versions-1-input": "2.5"})
    assert admin_client_.post(url, again).status_code == 302
    assert Model.objects.get(public_id="chat-a").price_versions[1] == {"effective_from": "2026-06-01", "input": 2.5}


def test_concurrency_and_hedge_are_labelled_boxes(admin_client_, imported):
    url = _model_page(admin_client_)
    data = page_data(admin_client_.get(url))
    data.update(concurrency_initial="20", concurrency_max="200", concurrency_queue="1000")
    data.update(hedge_budget_pct="5", hedge_tools="true")
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)
    model = Model.objects.get(public_id="chat-a")
    assert model.concurrency == {"initial": 20, "max": 200, "queue": 1000}
    assert model.hedge == {"budget_pct": 5, "tools": True}


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"concurrency_initial": "0"}, "concurrency", "concurrency initial of model 'chat-a' must be a whole number"),
        (
            {"concurrency_min": "9", "concurrency_max": "3"},
            "concurrency",
            "concurrency min 9 of model 'chat-a' exceeds",
        ),
        ({"hedge_budget_pct": "500"}, "hedge", "hedge budget_pct of model 'chat-a' must be a number more than 0"),
        (
            {"price_versions-0-effective_from": "someday", "price_versions-0-input": "3"},
            "price_versions",
            "effective_from of a price entry of model 'chat-a' must be a date",
        ),
        (
            {"price_versions-0-effective_from": "2026-01-01", "price_versions-0-input": "-1"},
            "price_versions",
            "price input of model 'chat-a' must be a number of at least 0",
        ),
    ],
)
def test_a_bad_model_setting_is_refused_on_its_field(admin_client_, imported, values, field, message):
    url = _model_page(admin_client_)
    data = page_data(admin_client_.get(url))
    data.update(values)
    before = dump_yaml(export_document())
    response = admin_client_.post(url, data)
    assert response.status_code == 200
    assert message in _field_errors(response, field)
    assert dump_yaml(export_document()) == before


def test_saving_a_page_unchanged_records_no_configuration_change(admin_client_, imported):
    from routing.config.store import import_document

    doc = imported
    doc["models"][0].update(
        {
            "prices": [
                {"output": 15, "effective_from": "2026-01-01", "input": 3.0},
                {"effective_from": "2026-06-01", "input": 2.5},
            ],
            "concurrency": {"max": 50, "initial": 10},
            "hedge": {"tools": False, "budget_pct": 5},
        }
    )
    import_document(doc)
    assert (
        _add_key(
            admin_client_, allowed_models='["gpt-*", "[ab]-*"]', metadata='{"team": "x", "n": 1, "a=b": "c"}'
        ).status_code
        == 302
    )
    key = ApiKey.objects.get()
    stored_key = (key.allowed_models, key.metadata)
    document, revisions = dump_yaml(export_document()), ConfigRevision.objects.count()
    version = ConfigVersion.objects.get().version

    for url in (_model_page(admin_client_), reverse("admin:policies_apikey_change", args=[key.pk])):
        response = admin_client_.post(url, page_data(admin_client_.get(url)))
        assert response.status_code == 302, text(response)

    assert dump_yaml(export_document()) == document
    assert ConfigRevision.objects.count() == revisions
    assert ConfigVersion.objects.get().version == version, "nothing saved: no reload of every process"
    model = Model.objects.get(public_id="chat-a")
    assert list(model.concurrency) == ["max", "initial"] and model.price_versions[0]["input"] == 3.0
    key.refresh_from_db()
    assert (key.allowed_models, key.metadata) == stored_key


def test_a_new_fallback_row_starts_at_the_next_position(admin_client_, imported):
    url = _model_page(admin_client_)
    page = admin_client_.get(url)
    data = page_data(page)
    assert data["fallback_links-0-position"] == 0  # chat-a's one link
    assert data["fallback_links-1-position"] == 1, "the blank row is the next one, not 0"
    added = page.context["inline_admin_formsets"][0].formset.empty_form  # "Add another" copies it
    assert added["position"].value() == 2
    chat_c = Model.objects.create(
        public_id="chat-c",
        upstream_model="x",
        provider=Model.objects.get(public_id="chat-b").provider,
        capabilities=["chat", "streaming", "tools"],
    )
    data["fallback_links-1-target"] = chat_c.pk
    assert admin_client_.post(url, data).status_code == 302
    assert export_document()["models"][0]["fallbacks"] == ["chat-b", "chat-c"]


def test_a_deployment_s_prices_are_labelled_boxes(admin_client_):
    from routing.config.store import import_document
    from tests.config.test_deployments_config import with_deployments

    import_document(with_deployments())
    url = _model_page(admin_client_, "chat-d")
    page = admin_client_.get(url)
    assert "Prices (US$ per million tokens)" in text(page)
    data = page_data(page)
    data.update({"deployments-0-prices_input": "2.4", "deployments-0-prices_output": "12"})
    assert admin_client_.post(url, data).status_code == 302
    chat_d = next(m for m in export_document()["models"] if m["id"] == "chat-d")
    assert chat_d["deployments"][0]["prices"] == {"input": 2.4, "output": 12}

    data = page_data(admin_client_.get(url))
    data["deployments-1-prices_reasoning"] = "-3"
    response = admin_client_.post(url, data)
    assert response.status_code == 200
    assert "price reasoning of deployment 'local-b' of model 'chat-d' must be a number of at least 0" in text(response)


def test_an_alert_rule_s_destination_events_and_thresholds_are_typed_without_json(admin_client_, imported):
    from routing.models import AlertRule

    add = reverse("admin:routing_alertrule_add")
    page = text(admin_client_.get(add))
    assert 'name="webhook_url"' in page and 'type="checkbox" name="events" value="breaker_open"' in page
    fields = {"name": "ops", "email": "ops@example.com\noncall@example.com", "events": ["parked", "breaker_open"]}
    response = admin_client_.post(add, {**fields, "budget_percent": "80, 100"})
    assert response.status_code == 302, text(response)
    rule = AlertRule.objects.get()
    assert (rule.email, rule.events, rule.budget_percent, rule.webhook) == (
        {"to": ["ops@example.com", "oncall@example.com"]},
        ["breaker_open", "parked"],
        [80, 100],
        None,
    )
    revisions = ConfigRevision.objects.count()
    url = reverse("admin:routing_alertrule_change", args=[rule.pk])
    assert admin_client_.post(url, page_data(admin_client_.get(url))).status_code == 302
    assert ConfigRevision.objects.count() == revisions

    data = {**page_data(admin_client_.get(url)), "webhook_url": "http://hooks.example/x", "budget_percent": "80, 2000"}
    refused = admin_client_.post(url, data)
    assert "must have exactly one destination" in text(refused)
    assert "budget_percent of alert 'ops' must be a list of whole percentages" in _field_errors(
        refused, "budget_percent"
    )


@pytest.mark.parametrize(
    "stored",
    [
        {"team": "search", "n": 42, "quoted": "42", "flag": "true", "none": None, "list": [1, "x"]},
        {"padded": " x ", "lines": "a\nb", "empty": ""},
        {"a=b": "key with an equals sign"},  # shown as a JSON object
    ],
)
def test_metadata_text_reads_back_as_the_stored_mapping(stored):
    from routing.ops.admin_widgets import key_value_text, parse_key_values

    assert parse_key_values(key_value_text(stored)) == stored


def test_a_pattern_starting_with_a_character_class_is_a_pattern_not_json():
    from routing.ops.admin_widgets import split_list

    assert split_list("[ab]-*\nchat-*") == ["[ab]-*", "chat-*"]
    assert split_list('["x", "y"]') == ["x", "y"] and split_list("[]") == []
