"""Overload keys of the configuration document: validated, stored, exported, edited in the admin,
and carried by the snapshot (docs/overload.md#configuration)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies.keys import KeyProblems, check_controls
from policies.models import Agent, Org
from providers.models import Model
from routing.config.document import document_from_db
from routing.config.overload_spec import build_overload
from routing.config.snapshot import build_snapshot
from routing.config.store import ConfigInvalid, dump_yaml, export_document, import_document, load_yaml
from routing.config.validation import validate_document
from routing.core.admission_queue import PRIORITIES
from tests.config.admin_helpers import page_data, text

pytestmark = pytest.mark.django_db


def with_overload(doc: dict) -> dict:
    doc["models"][0]["concurrency"] = {"initial": 8, "min": 2, "max": 64, "queue": 50}
    doc["models"][0]["hedge"] = {"budget_pct": 3}
    org = doc["orgs"][0]
    org["priority"], org["weight"] = "batch", 2
    org["agents"][0]["priority"] = "interactive"
    org["agents"].append({"name": "payments", "side_effects": True})
    return doc


def test_overload_keys_round_trip_and_a_second_import_saves_nothing(valid_doc, saved_signals):
    import_document(with_overload(valid_doc))
    doc = export_document()
    assert doc["models"][0]["concurrency"] == {"initial": 8, "min": 2, "max": 64, "queue": 50}
    assert doc["models"][0]["hedge"] == {"budget_pct": 3}
    assert (doc["orgs"][0]["priority"], doc["orgs"][0]["weight"]) == ("batch", 2)
    agents = {a["name"]: a for a in doc["orgs"][0]["agents"]}
    assert agents["support-bot"]["priority"] == "interactive"
    assert agents["payments"] == {"name": "payments", "side_effects": True}
    first = dump_yaml(doc)
    saved_signals.clear()
    assert not import_document(load_yaml(first)).changed
    assert saved_signals == []


def test_a_document_without_overload_keys_exports_none_and_the_snapshot_has_none(valid_doc):
    import_document(valid_doc)
    text_ = dump_yaml(export_document())
    for key in ("concurrency", "hedge", "weight", "side_effects"):
        assert key not in text_
    assert build_snapshot(document_from_db(), [], {}).overload is None


def test_the_snapshot_carries_limits_classes_weights_and_hedging(valid_doc):
    import_document(with_overload(valid_doc))
    rows = [{"key_hash": "h", "prefix": "sb-batchy", "org": "acme", "agent": "support-bot", "priority": "batch"}]
    spec = build_snapshot(document_from_db(), rows, {}).overload
    limit = spec.limits["chat-a"]
    assert (limit.initial, limit.min_limit, limit.max_limit, limit.queue) == (8, 2, 64, 50)
    assert "chat-b" not in spec.limits
    assert spec.hedge["chat-a"].budget_pct == 3 and spec.hedge["chat-a"].tools is False
    assert spec.key_classes == {"sb-batchy": PRIORITIES["batch"]}
    assert spec.agent_classes == {("acme", "support-bot"): PRIORITIES["interactive"]}
    assert spec.org_classes == {"acme": PRIORITIES["batch"]}
    assert spec.weights == {"acme": 2.0}
    assert spec.never_hedge == {("acme", "payments")}


@pytest.mark.parametrize(
    ("edit", "path", "says"),
    [
        (lambda d: d["models"][0].update(concurrency={"initial": 0}), "models[chat-a].concurrency.initial", "at least 1"),
        (lambda d: d["models"][0].update(concurrency={"burst": 3}), "models[chat-a].concurrency.burst", "unknown"),
        (lambda d: d["models"][0].update(concurrency={"min": 9, "max": 4}), "models[chat-a].concurrency.min", "max 4"),
        (lambda d: d["models"][0].update(concurrency=5), "models[chat-a].concurrency", "must be a mapping"),
        (lambda d: d["models"][0].update(hedge={"budget_pct": 0}), "models[chat-a].hedge.budget_pct", "more than 0"),
        (lambda d: d["models"][0].update(hedge={"tools": "yes"}), "models[chat-a].hedge.tools", "true or false"),
        (lambda d: d["orgs"][0].update(priority="urgent"), "orgs[acme].priority", "interactive | default | batch"),
        (lambda d: d["orgs"][0].update(weight=-1), "orgs[acme].weight", "positive number"),
        (lambda d: d["orgs"][0]["agents"][0].update(priority=3), "orgs[acme].agents[support-bot].priority", "use one"),
        (lambda d: d["orgs"][0]["agents"][0].update(side_effects="no"), "orgs[acme].agents[support-bot].side_effects", "true"),
    ],
)  # fmt: skip
def test_a_bad_overload_value_is_refused_with_its_path_and_what_to_do(valid_doc, edit, path, says):
    edit(valid_doc)
    errors = validate_document(valid_doc)
    assert [e.path for e in errors] == [path], errors
    assert says in errors[0].message
    with pytest.raises(ConfigInvalid):
        import_document(valid_doc)
    assert not Model.objects.exists()


def test_a_key_priority_is_validated_with_the_key_controls():
    with pytest.raises(KeyProblems) as raised:
        check_controls({"priority": "urgent"})
    assert raised.value.problems[0][0] == "priority" and "interactive | default | batch" in raised.value.problems[0][1]
    check_controls({"priority": "batch"})


def test_build_overload_is_none_without_any_overload_key(valid_doc):
    assert build_overload(valid_doc, [{"prefix": "p", "priority": ""}]) is None


def test_admin_saves_a_model_limit_and_refuses_a_bad_one_on_its_field(admin_client_, imported):
    url = reverse("admin:providers_model_change", args=[Model.objects.get(public_id="chat-a").pk])
    data = page_data(admin_client_.get(url))
    data["concurrency"] = '{"initial": 10, "max": 40}'
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:2000]
    assert export_document()["models"][0]["concurrency"] == {"initial": 10, "max": 40}

    data = page_data(admin_client_.get(url))
    data["concurrency"] = '{"initial": 50, "max": 40}'
    page = text(admin_client_.post(url, data))
    row = page[page.index('class="form-row errors field-concurrency') :]
    assert "concurrency initial 50 of model 'chat-a' must lie between its min and max" in row[:3000]


def test_admin_saves_org_weight_and_class_and_agent_class(admin_client_, imported):
    url = reverse("admin:policies_org_change", args=[Org.objects.get().pk])
    data = page_data(admin_client_.get(url))
    data["weight"], data["priority"] = "3", "default"
    data["agents-0-priority"], data["agents-0-side_effects"] = "batch", "on"
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:2000]
    org = export_document()["orgs"][0]
    assert (org["weight"], org["priority"]) == (3, "default")
    assert org["agents"][0]["priority"] == "batch" and org["agents"][0]["side_effects"] is True
    assert Agent.objects.get().side_effects is True


def test_a_key_created_or_updated_with_a_priority_reaches_the_snapshot(imported):
    from policies.keys import create_api_key, update_key
    from routing.config.document import key_rows_from_db

    key, _ = create_api_key(agent=Agent.objects.get(), priority="batch")
    spec = build_snapshot(document_from_db(), key_rows_from_db(), {}).overload
    assert spec.key_classes == {key.prefix: PRIORITIES["batch"]}
    update_key(key, {"priority": None})  # back to the agent's
    assert build_snapshot(document_from_db(), key_rows_from_db(), {}).overload is None
    with pytest.raises(KeyProblems):
        update_key(key, {"priority": "urgent"})
