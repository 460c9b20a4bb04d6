"""`cache_ttl_s` on models: stored, exported, imported, edited in the admin, carried by the snapshot (docs/cache.md)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from providers.models import Model
from routing.config.document import document_from_db
from routing.config.snapshot import build_snapshot
from routing.config.store import dump_yaml, export_document, import_document, load_yaml
from tests.config.admin_helpers import page_data, text

pytestmark = pytest.mark.django_db


def _chat_a(doc: dict) -> dict:
    return next(m for m in doc["models"] if m["id"] == "chat-a")


def test_cache_ttl_round_trips_and_a_second_import_saves_nothing(valid_doc, saved_signals):
    _chat_a(valid_doc)["cache_ttl_s"] = 300
    import_document(valid_doc)
    assert _chat_a(export_document())["cache_ttl_s"] == 300
    first = dump_yaml(export_document())
    assert "cache_ttl_s: 300" in first
    saved_signals.clear()
    assert not import_document(load_yaml(first)).changed
    assert saved_signals == []


def test_no_ttl_means_no_key_in_the_export_and_no_cache_in_the_snapshot(valid_doc):
    import_document(valid_doc)
    assert "cache_ttl_s" not in dump_yaml(export_document())
    snap = build_snapshot(document_from_db(), [], {})
    assert snap.models["chat-a"].cache_ttl_s is None


def test_the_snapshot_carries_the_ttl_and_removing_it_turns_the_cache_off(valid_doc):
    _chat_a(valid_doc)["cache_ttl_s"] = 60
    import_document(valid_doc)
    assert build_snapshot(document_from_db(), [], {}).models["chat-a"].cache_ttl_s == 60
    _chat_a(valid_doc).pop("cache_ttl_s")
    import_document(valid_doc)
    assert Model.objects.get(public_id="chat-a").cache_ttl_s is None


def test_admin_sets_and_clears_the_ttl(admin_client_, imported):
    url = reverse("admin:providers_model_change", args=[Model.objects.get(public_id="chat-a").pk])
    page = admin_client_.get(url)
    assert 'name="cache_ttl_s"' in text(page)
    data = page_data(page)
    data["cache_ttl_s"] = "120"
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)[:2000]
    assert _chat_a(export_document())["cache_ttl_s"] == 120
    data = page_data(admin_client_.get(url))
    data["cache_ttl_s"] = ""
    assert admin_client_.post(url, data).status_code == 302
    assert "cache_ttl_s" not in _chat_a(export_document())
