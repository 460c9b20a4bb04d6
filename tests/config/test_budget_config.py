"""`budget: {usd, period}` on orgs and agents: stored, exported, imported, edited in the admin (docs/limits.md#budgets)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from policies.models import Agent, Org
from routing.config.document import document_from_db
from routing.config.snapshot import build_snapshot
from routing.config.store import ConfigInvalid, dump_yaml, export_document, import_document, load_yaml
from tests.config.admin_helpers import page_data, text

pytestmark = pytest.mark.django_db


def with_budgets(doc: dict) -> dict:
    org = doc["orgs"][0]
    org["budget"] = {"usd": 100, "period": "month"}
    org["agents"][0]["budget"] = {"usd": 2.5, "period": "day"}
    return doc


def test_budgets_round_trip_and_a_second_import_saves_nothing(valid_doc, saved_signals):
    import_document(with_budgets(valid_doc))
    org = export_document()["orgs"][0]
    assert org["budget"] == {"usd": 100, "period": "month"}
    assert org["agents"][0]["budget"] == {"usd": 2.5, "period": "day"}
    first = dump_yaml(export_document())
    saved_signals.clear()
    assert not import_document(load_yaml(first)).changed
    assert saved_signals == []
    assert dump_yaml(export_document()) == first


def test_an_export_without_budgets_has_no_budget_key(valid_doc):
    import_document(valid_doc)
    assert "budget:" not in dump_yaml(export_document())


def test_the_snapshot_carries_the_budgets(valid_doc):
    import_document(with_budgets(valid_doc))
    snap = build_snapshot(
        document_from_db(), [{"key_hash": "h", "prefix": "p", "org": "acme", "agent": "support-bot"}], {}
    )
    agent = snap.keys["h"].agent
    assert agent.budget == (2.5, "day")
    assert agent.org.budget == (100.0, "month")


def test_invalid_budgets_refuse_the_whole_import(valid_doc):
    valid_doc["orgs"][0]["budget"] = {"usd": -5, "period": "year"}
    with pytest.raises(ConfigInvalid) as raised:
        import_document(valid_doc)
    message = str(raised.value)
    assert "usd of the budget of org 'acme' must be a positive number" in message
    assert "unknown budget period 'year'" in message
    assert not Org.objects.exists()


def test_admin_saves_org_and_agent_budgets(admin_client_, imported):
    url = reverse("admin:policies_org_change", args=[Org.objects.get().pk])
    page = admin_client_.get(url)
    assert 'name="budget_usd"' in text(page) and 'name="agents-0-budget_period"' in text(page)
    assert "Models without prices cost 0" in text(page)
    data = page_data(page)
    data["budget_usd"], data["budget_period"] = "50", "total"
    data["agents-0-budget_usd"], data["agents-0-budget_period"] = "1", "day"
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:2000]
    org = export_document()["orgs"][0]
    assert org["budget"] == {"usd": 50, "period": "total"}
    assert org["agents"][0]["budget"] == {"usd": 1, "period": "day"}

    data = page_data(admin_client_.get(url))
    data["budget_usd"] = ""
    assert admin_client_.post(url, data).status_code == 302
    assert "budget" not in export_document()["orgs"][0]


def test_admin_agent_page_saves_a_budget(admin_client_, imported):
    url = reverse("admin:policies_agent_change", args=[Agent.objects.get().pk])
    data = page_data(admin_client_.get(url))
    data["budget_usd"], data["budget_period"] = "3", "month"
    assert admin_client_.post(url, data).status_code == 302
    assert Agent.objects.get().budget == {"usd": 3, "period": "month"}


def test_admin_pages_show_the_spend_and_what_is_held(admin_client_, imported):
    from routing.runtime.process import current

    org, agent = Org.objects.get(), Agent.objects.get()
    org.budget = {"usd": 10, "period": "month"}
    org.save()
    agent.budget = {"usd": 2, "period": "day"}
    agent.save()
    budgets = current().budgets
    budgets.forget()
    try:
        budgets.admit(org.name, (10.0, "month"), agent.name, (2.0, "day"), 0.25).settle(0.25)
        budgets.admit(org.name, (10.0, "month"), agent.name, (2.0, "day"), 0.5)  # in flight
        page = text(admin_client_.get(reverse("admin:policies_agent_change", args=[agent.pk])))
        assert "$0.2500 spent this day (resets" in page
        assert "$0.5000 held by requests in flight, of $2 (38%)" in page
        page = text(admin_client_.get(reverse("admin:policies_org_change", args=[org.pk])))
        assert "$0.2500 spent this month" in page and "of $10 (8%)" in page
    finally:
        budgets.forget()
