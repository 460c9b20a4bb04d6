"""`limits: {rpm, tpm}` on orgs and agents: stored, exported, imported, edited in the admin (docs/limits.md)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies.models import Agent, Org
from routing.config.document import document_from_db
from routing.config.snapshot import build_snapshot
from routing.config.store import ConfigInvalid, dump_yaml, export_document, import_document, load_yaml
from tests.config.admin_helpers import page_data, text

pytestmark = pytest.mark.django_db


def with_limits(doc: dict) -> dict:
    org = doc["orgs"][0]
    org["limits"] = {"rpm": 600, "tpm": 200000}
    org["agents"][0]["limits"] = {"rpm": 60}
    return doc


def test_limits_round_trip_and_a_second_import_saves_nothing(valid_doc, saved_signals):
    import_document(with_limits(valid_doc))
    org = export_document()["orgs"][0]
    assert org["limits"] == {"rpm": 600, "tpm": 200000}
    assert org["agents"][0]["limits"] == {"rpm": 60}
    first = dump_yaml(export_document())
    assert "rpm: 600" in first
    saved_signals.clear()
    assert not import_document(load_yaml(first)).changed
    assert saved_signals == []
    assert dump_yaml(export_document()) == first


def test_an_export_without_limits_has_no_limits_key(valid_doc):
    import_document(valid_doc)
    text_ = dump_yaml(export_document())
    assert "limits" not in text_
    assert export_document()["orgs"] == valid_doc["orgs"]


def test_removing_limits_in_the_file_clears_them(valid_doc):
    import_document(with_limits(valid_doc))
    valid_doc["orgs"][0].pop("limits")
    valid_doc["orgs"][0]["agents"][0].pop("limits")
    import_document(valid_doc)
    assert Org.objects.get().limits is None and Agent.objects.get().limits is None


def test_the_snapshot_carries_the_limits(valid_doc):
    import_document(with_limits(valid_doc))
    snap = build_snapshot(
        document_from_db(), [{"key_hash": "h", "prefix": "p", "org": "acme", "agent": "support-bot"}], {}
    )
    agent = snap.keys["h"].agent
    assert agent.limits == (60, None)
    assert agent.org.limits == (600, 200000)


def test_invalid_limits_refuse_the_whole_import(valid_doc):
    valid_doc["orgs"][0]["limits"] = {"rpm": 0, "burst": 5}
    with pytest.raises(ConfigInvalid) as raised:
        import_document(valid_doc)
    message = str(raised.value)
    assert "rpm of org 'acme' must be a positive whole number" in message
    assert "unknown limit 'burst'" in message
    assert not Org.objects.exists()


def test_admin_saves_org_and_agent_limits(admin_client_, imported):
    url = reverse("admin:policies_org_change", args=[Org.objects.get().pk])
    page = admin_client_.get(url)
    assert 'name="limits_rpm"' in text(page) and 'name="agents-0-limits_tpm"' in text(page)
    data = page_data(page)
    data["limits_tpm"] = "5000"
    data["agents-0-limits_rpm"], data["agents-0-limits_tpm"] = "30", "1000"
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:2000]
    org = export_document()["orgs"][0]
    assert org["limits"] == {"tpm": 5000}
    assert org["agents"][0]["limits"] == {"rpm": 30, "tpm": 1000}

    data = page_data(admin_client_.get(url))
    data["limits_tpm"] = ""
    assert admin_client_.post(url, data).status_code == 302
    assert "limits" not in export_document()["orgs"][0]


def test_admin_agent_page_saves_limits(admin_client_, imported):
    url = reverse("admin:policies_agent_change", args=[Agent.objects.get().pk])
    data = page_data(admin_client_.get(url))
    data["limits_rpm"] = "10"
    assert admin_client_.post(url, data).status_code == 302
    assert Agent.objects.get().limits == {"rpm": 10}


def test_admin_budget_fields_save_a_budget_and_a_blank_amount_removes_it(admin_client_, imported):
    url = reverse("admin:policies_org_change", args=[Org.objects.get().pk])
    page = text(admin_client_.get(url))
    assert 'name="budget_usd"' in page and '<option value="month" selected>month</option>' in page
    data = page_data(admin_client_.get(url))
    data["budget_usd"], data["budget_period"] = "2.5", "day"
    data["agents-0-budget_usd"], data["agents-0-budget_period"] = "1", "total"
    assert admin_client_.post(url, data).status_code == 302
    org = export_document()["orgs"][0]
    assert org["budget"] == {"usd": 2.5, "period": "day"} and org["agents"][0]["budget"] == {
        "usd": 1,
        "period": "total",
    }
    page = text(admin_client_.get(url))
    assert 'name="budget_usd" value="2.5"' in page and '<option value="day" selected>day</option>' in page

    data = page_data(admin_client_.get(url))
    data["budget_usd"] = ""
    assert admin_client_.post(url, data).status_code == 302
    assert "budget" not in export_document()["orgs"][0]


def test_a_bad_limit_is_shown_on_its_field_with_the_validation_message(admin_client_, imported):
    url = reverse("admin:policies_org_change", args=[Org.objects.get().pk])
    data = page_data(admin_client_.get(url))
    data["limits_rpm"] = "0"
    page = text(admin_client_.post(url, data))
    row = page[page.index('class="form-row errors field-limits') :]
    row = row[: row.index('name="limits_rpm"')]
    assert "rpm of org 'acme' must be a positive whole number of requests per minute, got 0" in row
