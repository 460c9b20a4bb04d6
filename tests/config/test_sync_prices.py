"""`manage.py sync_prices` (docs/commands.md#sync_prices): a price catalogue compared with the configured prices,
dated versions proposed, accepted (through the one validation, recorded, reloaded) or rejected."""

from __future__ import annotations

import json
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from routing.config import live, price_proposals
from routing.config.store import export_document, import_document
from routing.models import ConfigRevision
from routing.runtime.usage.pricing import priced_version

pytestmark = pytest.mark.django_db

CATALOGUE = {
    "providers": [
        {
            "id": "openai",
            "models": [
                {"id": "gpt-4o-mini", "prices": {"input_mtok": 0.15, "output_mtok": 0.6, "cache_read_mtok": 0.075}},
                {"id": "gpt-4o", "aliases": ["gpt-4o-2024-08-06"], "prices": {"input_mtok": 2.5, "output_mtok": 10}},
            ],
        }
    ]
}


@pytest.fixture
def proposals_file(tmp_path, settings):
    settings.SWITCHBOARD_PRICE_PROPOSALS_FILE = str(tmp_path / "proposals.json")
    return tmp_path / "proposals.json"


@pytest.fixture
def catalogue(tmp_path):
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps(CATALOGUE))
    return str(path)


def _run(*args: str) -> str:
    out = StringIO()
    call_command("sync_prices", *args, stdout=out)
    return out.getvalue()


def _priced_like_the_catalogue(doc):
    doc["models"][1].update(input_price_per_mtok=2.5, output_price_per_mtok=10)  # the operator's, the same
    doc["models"][0].update(input_price_per_mtok=0.2, output_price_per_mtok=0.8)  # the operator's own, older
    return doc


def test_from_a_file_it_proposes_a_version_for_each_model_priced_otherwise(valid_doc, proposals_file, catalogue):
    import_document(_priced_like_the_catalogue(valid_doc))
    out = _run("--from", catalogue, "--day", "2026-12-01")
    assert "proposed: chat-a (gpt-4o-mini) from 2026-12-01: input 0.2 -> 0.15; output 0.8 -> 0.6" in out
    assert "chat-b" not in out.split("proposed:")[1]  # its price is the catalogue's
    [p] = price_proposals.pending()
    assert (p.model, p.prices) == ("chat-a", {"input": 0.15, "output": 0.6, "cache_read": 0.075})
    assert export_document()["models"][0].get("prices") is None  # a proposal only: nothing written


def test_accepting_changes_the_next_requests_cost_after_the_reload_and_keeps_the_operators_price(
    valid_doc, proposals_file, catalogue
):
    import_document(_priced_like_the_catalogue(valid_doc))
    live.rebuild_from_db("test")
    before = priced_version(live.current().models["chat-a"], 1_000_000, 0)
    _run("--from", catalogue, "--day", "2026-01-01")
    out = _run("--accept", "chat-a")
    assert out.startswith("accepted: chat-a priced from 2026-01-01")
    live.rebuild_from_db("config changed")  # what every serving process does on the change's broadcast
    after = priced_version(live.current().models["chat-a"], 1_000_000, 0, now=time.time())
    assert before == ("", pytest.approx(0.2)) and after == ("2026-01-01", pytest.approx(0.15))
    model = export_document()["models"][0]
    assert (model["input_price_per_mtok"], model["output_price_per_mtok"]) == (0.2, 0.8)  # not overwritten
    assert model["prices"] == [{"effective_from": "2026-01-01", "input": 0.15, "output": 0.6, "cache_read": 0.075}]
    revision = ConfigRevision.objects.first()
    assert revision.source == "sync_prices" and "chat-a" in revision.summary + json.dumps(revision.changes)
    assert price_proposals.pending() == []


def test_an_operators_version_on_that_day_is_not_overwritten_and_reject_drops_a_proposal(
    valid_doc, proposals_file, catalogue
):
    doc = _priced_like_the_catalogue(valid_doc)
    doc["models"][0]["prices"] = [{"effective_from": "2026-03-01", "input": 0.3}]
    import_document(doc)
    out = _run("--from", catalogue, "--day", "2026-03-01")
    assert "left as is: chat-a: a price version already starts on 2026-03-01: not overwritten" in out
    _run("--from", catalogue, "--day", "2026-04-01")
    assert _run("--reject", "chat-a") == "rejected: chat-a\n"
    assert price_proposals.pending() == []
    with pytest.raises(CommandError, match="no price proposal waits for model 'chat-a'"):
        _run("--accept", "chat-a")
    assert export_document()["models"][0]["prices"] == [{"effective_from": "2026-03-01", "input": 0.3}]


def test_the_pinned_genai_prices_catalogue_knows_the_usual_models(valid_doc, proposals_file):
    import_document(valid_doc)  # no prices at all: each model the catalogue knows gets a proposal
    out = _run("--day", "2026-12-01")
    models = {p.model: p for p in price_proposals.pending()}
    assert set(models) == {"chat-a", "chat-b"}, out
    assert models["chat-a"].prices["input"] > 0 and models["chat-a"].current["input"] is None


def test_the_admin_page_lists_and_accepts(valid_doc, proposals_file, catalogue, admin_client_):
    import_document(_priced_like_the_catalogue(valid_doc))
    _run("--from", catalogue, "--day", "2026-02-01")
    url = reverse("price-proposals")
    page = admin_client_.get(url)
    assert page.status_code == 200 and b'data-model="chat-a"' in page.content
    done = admin_client_.post(url, {"model": "chat-a", "action": "accept"})
    assert b"chat-a is priced from 2026-02-01" in done.content
    assert export_document()["models"][0]["prices"][0]["effective_from"] == "2026-02-01"
    assert b"No proposal waits" in done.content
