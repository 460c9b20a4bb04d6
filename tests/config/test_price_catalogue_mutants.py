"""A price catalogue against the configured prices (docs/commands.md#sync_prices): how a catalogue's entries
are read, how a configured model finds its entry, and which models get a dated proposal or a note."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest

from routing.config import price_catalogue
from routing.config.price_catalogue import FileCatalogue, PackageCatalogue, Proposal, current_prices, propose


def test_catalogue_prices_become_switchboard_price_keys():
    raw = {
        "input_mtok": 1,
        "output_mtok": Decimal("2.5"),
        "cache_read_mtok": {"base": 0.5, "tiers": []},
        "cache_write_mtok": SimpleNamespace(base=Decimal("0.75")),
        "cache_write_1h_mtok": 1.5,
        "input_audio_mtok": 4.0,
        "output_audio_mtok": 8.0,
        "requests_kcount": 3.0,
    }
    assert price_catalogue.prices_of(raw) == {
        "input": 1.0,
        "output": 2.5,
        "cache_read": 0.5,
        "cache_write": 0.75,
        "cache_write_1h": 1.5,
        "audio_input": 4.0,
        "audio_output": 8.0,
    }


def test_odd_catalogue_values_are_left_out():
    raw = {"input_mtok": True, "output_mtok": "3", "cache_read_mtok": {"base": "x"}, "cache_write_mtok": None}
    assert price_catalogue.prices_of(raw) is None
    assert price_catalogue.prices_of({"output_mtok": 2, "input_mtok": SimpleNamespace()}) == {"output": 2.0}
    assert price_catalogue.prices_of(None) is None


def test_conditional_and_object_prices_take_the_first_entry():
    first = [{"prices": {"input_mtok": 1}}, {"prices": {"input_mtok": 9}}]
    assert price_catalogue.prices_of(first) == {"input": 1.0}
    objects = [SimpleNamespace(prices=SimpleNamespace(input_mtok=2, output_mtok=None)), None]
    assert price_catalogue.prices_of(objects) == {"input": 2.0}
    assert price_catalogue.prices_of(SimpleNamespace(output_mtok=3)) == {"output": 3.0}
    assert price_catalogue.prices_of([]) is None


def test_a_catalogue_model_with_an_empty_price_list_is_skipped_not_a_crash():
    catalogue = FileCatalogue([{"id": "x", "models": [{"id": "m", "prices": []}, {"id": "n", "prices": [{}]}]}])
    assert (catalogue.lookup("m", "x"), catalogue.lookup("n", None)) == (None, None)


def test_a_file_catalogue_matches_ids_and_aliases_per_provider_then_anywhere():
    catalogue = FileCatalogue(
        {
            "providers": [
                {
                    "id": "OpenAI",
                    "models": [{"id": "GPT-4o", "aliases": ["gpt-4o-latest"], "prices": {"input_mtok": 2}}],
                },
                {
                    "id": "azure",
                    "models": [
                        {"id": "gpt-4o", "prices": {"input_mtok": 3}},
                        {"id": "no-prices", "prices": {}},
                        {"id": "after-no-prices", "prices": {"input_mtok": 4}},
                        {"id": "", "aliases": [None, 7], "prices": {"input_mtok": 1}},
                    ],
                },
                {"id": "empty"},
                {"models": [{"id": "gpt-4o", "prices": {"input_mtok": 9}}]},
            ]
        }
    )
    assert catalogue.lookup("gpt-4o", "azure") == {"input": 3.0}
    assert catalogue.lookup("GPT-4O-LATEST", "openai") == {"input": 2.0}
    assert catalogue.lookup("gpt-4o", None) == {"input": 2.0}  # anywhere: the first provider listing it
    assert catalogue.lookup("gpt-4o-latest", "azure") == {"input": 2.0}  # not azure's: anywhere
    assert catalogue.lookup("gpt-4o", "google") == {"input": 2.0}
    assert catalogue.lookup("no-prices", None) is None
    assert catalogue.lookup("after-no-prices", "azure") == {"input": 4.0}
    for name in ("none", "xxxx"):  # a provider entry without an id is matched anywhere only
        assert catalogue.lookup("gpt-4o", name) == {"input": 2.0}
    assert catalogue.lookup("", None) is None


def test_a_file_catalogue_may_be_the_bare_list_and_nothing_else():
    assert FileCatalogue([{"id": "x", "models": [{"id": "m", "prices": {"output_mtok": 1}}]}]).lookup("m", "x") == {
        "output": 1.0
    }
    for data in ({"models": []}, "providers", None):
        with pytest.raises(ValueError) as caught:
            FileCatalogue(data)
        assert str(caught.value) == "a price catalogue is a list of providers, each {id, models: [{id, prices}]}"


def test_the_package_catalogue_prices_by_provider_then_anywhere():
    catalogue = PackageCatalogue()
    assert catalogue.lookup("gpt-4o-mini", "openai") == {"input": 0.15, "output": 0.6, "cache_read": 0.075}
    assert catalogue.lookup("claude-sonnet-4-0", "openai")["input"] == 3.0  # not openai's: anywhere
    assert catalogue.lookup("gpt-4o-mini", None)["input"] == 0.15
    assert catalogue.lookup("no-such-model-anywhere", "openai") is None
    assert catalogue.lookup("no-such-model-anywhere", None) is None


def test_the_package_catalogue_prefers_the_providers_own_price():
    catalogue = PackageCatalogue()
    assert (catalogue.lookup("ada", "azure"), catalogue.lookup("ada", "openai")) == (
        {"input": 0.1},
        {"input": 0.4, "output": 0.4},
    )
    on_vertex, anywhere = catalogue.lookup("claude-3-5-haiku", "google"), catalogue.lookup("claude-3-5-haiku", None)
    assert "cache_write_1h" not in on_vertex and anywhere["cache_write_1h"] == 1.6


def test_a_proposal_says_what_changes():
    proposal = Proposal("chat", "up", "2026-01-01", {"input": 2.0, "output": 8.0, "cache_read": 0.5}, {"input": 2.5})
    assert proposal.entry() == {"effective_from": "2026-01-01", "input": 2.0, "output": 8.0, "cache_read": 0.5}
    assert proposal.changes() == ["input 2.5 -> 2", "output none -> 8", "cache_read none -> 0.5"]
    same = Proposal("chat", "up", "2026-01-01", {"input": 2.0}, {"input": 2.0, "output": 1.0})
    assert same.changes() == []
    assert Proposal("m", "u", "d", {}).current == {}


def test_the_price_on_a_day_is_the_flat_one_then_each_version_started_by_then():
    item = {
        "input_price_per_mtok": 3,
        "output_price_per_mtok": 15,
        "prices": [
            {"effective_from": "2026-06-01", "input": 2},
            {"effective_from": date(2026, 3, 1), "output": 10},
        ],
    }
    assert current_prices(item, date(2026, 2, 28))["input"] == 3.0
    assert (current_prices(item, date(2026, 3, 1))["input"], current_prices(item, date(2026, 3, 1))["output"]) == (
        3.0,
        10.0,
    )
    june = current_prices(item, date(2026, 6, 1))
    assert (june["input"], june["output"], june["cache_read"]) == (2.0, 10.0, None)
    assert current_prices({"input_price_per_mtok": 1}, date(2026, 1, 1))["input"] == 1.0
    listed_late_first = {
        "prices": [{"effective_from": "2026-06-01", "input": 2}, {"effective_from": "2026-03-01", "input": 9}]
    }
    assert current_prices(listed_late_first, date(2026, 7, 1))["input"] == 2.0  # by date, not by listing order


class Recording:
    """A catalogue that records the (model, provider) asked and answers from a table."""

    def __init__(self, table: dict) -> None:
        self.table, self.asked = table, []

    def lookup(self, upstream_model, provider):
        self.asked.append((upstream_model, provider))
        return self.table.get(upstream_model)


DOCUMENT = {
    "providers": [
        {"name": "az", "dialect": "azure_openai"},
        {"name": "oa"},
        {"name": "gem", "dialect": "gemini"},
        {"name": "odd", "dialect": "mystery"},
    ],
    "models": [
        {"id": "cheap", "provider": "az", "upstream_model": "gpt-4o", "input_price_per_mtok": 5},
        {"id": "same", "provider": "oa", "upstream_model": "gpt-4o-mini", "input_price_per_mtok": 0.15},
        {"id": "gem", "deployments": [{"provider": "gem", "upstream_model": "gemini-x"}, {"provider": "oa"}]},
        {"id": "unknown", "provider": "odd", "upstream_model": "nobody-knows"},
        {"id": "virtual", "provider": "oa"},
        {"id": "dated", "provider": "oa", "upstream_model": "gpt-4o", "prices": [{"effective_from": "2026-05-01"}]},
        {"id": "last", "provider": "oa", "upstream_model": "gpt-4o-mini"},
    ],
}


def test_propose_compares_each_model_on_the_day_and_notes_what_it_leaves():
    catalogue = Recording({"gpt-4o": {"input": 2.5}, "gpt-4o-mini": {"input": 0.15}, "gemini-x": {"output": 1.0}})
    proposals, notes = propose(DOCUMENT, catalogue, date(2026, 5, 1))
    assert catalogue.asked == [
        ("gpt-4o", "azure"),
        ("gpt-4o-mini", "openai"),  # no dialect: openai
        ("gemini-x", "google"),  # the first deployment's provider
        ("nobody-knows", None),  # a dialect the catalogue has no provider for: any provider
        ("gpt-4o", "openai"),
        ("gpt-4o-mini", "openai"),
    ]
    assert proposals == [
        Proposal("cheap", "gpt-4o", "2026-05-01", {"input": 2.5}, current_prices(DOCUMENT["models"][0], date.today())),
        Proposal("gem", "gemini-x", "2026-05-01", {"output": 1.0}, current_prices({}, date.today())),
        Proposal("last", "gpt-4o-mini", "2026-05-01", {"input": 0.15}, current_prices({}, date.today())),
    ]
    assert notes == [
        "unknown: nobody-knows is not in the catalogue",
        "dated: a price version already starts on 2026-05-01: not overwritten",
    ]
    proposals, notes = propose(DOCUMENT, catalogue, date(2026, 5, 2))
    assert [p.model for p in proposals] == ["cheap", "gem", "dated", "last"]


def test_an_empty_document_proposes_nothing():
    assert propose({}, Recording({}), date(2026, 1, 1)) == ([], [])


def test_today_is_the_utc_date():
    assert price_catalogue.today() == datetime.now(UTC).date()
