"""The configuration diff: keyed entries compared entry by entry, ordered lists as one value."""

from __future__ import annotations

import copy

from routing.config.diff import diff_documents, empty_document, render, summarise
from tests.config.conftest import VALID


def doc():
    return copy.deepcopy(VALID)


def test_identical_documents_have_no_changes_and_reordered_entries_are_the_same():
    a, b = doc(), doc()
    b["models"].reverse()
    assert diff_documents(a, a) == []
    assert diff_documents(a, b) == []


def test_a_changed_field_of_a_model_is_one_change_named_by_the_model_id():
    new = doc()
    new["models"][1]["upstream_model"] = "gpt-4.1"
    assert diff_documents(doc(), new) == [
        {"op": "changed", "path": "models[chat-b].upstream_model", "old": "gpt-4o", "new": "gpt-4.1"}
    ]


def test_added_and_removed_entries_and_keys():
    new = doc()
    new["providers"].append({"name": "local-b", "dialect": "openai", "base_url": "http://127.0.0.1:9002/v1"})
    del new["aliases"]["fast"]
    new["orgs"][0]["agents"][0]["default_model"] = "chat-b"
    new["resilience"]["max_retries"] = 5
    changes = diff_documents(doc(), new)
    assert [(c["op"], c["path"]) for c in changes] == [
        ("changed", "resilience.max_retries"),
        ("added", "providers[local-b]"),
        ("removed", "aliases.fast"),
        ("changed", "orgs[acme].agents[support-bot].default_model"),
    ]
    assert render(changes) == [
        "~ resilience.max_retries: 2 -> 5",
        '+ providers[local-b]: {"name":"local-b","dialect":"openai","base_url":"http://127.0.0.1:9002/v1"}',
        "- aliases.fast",
        "~ orgs[acme].agents[support-bot].default_model: fast -> chat-b",
    ]
    assert summarise(changes) == ("~ resilience.max_retries; + providers[local-b]; - aliases.fast (and 1 more)")


def test_ordered_lists_are_compared_as_one_value():
    new = doc()
    new["models"][0]["fallbacks"] = []
    new["orgs"][0]["policies"].reverse()  # policy order is their meaning
    paths = [c["path"] for c in diff_documents(doc(), new)]
    assert paths == ["models[chat-a].fallbacks", "orgs[acme].policies"]


def test_credentials_are_keyed_by_provider():
    old, new = doc(), doc()
    old["orgs"][0]["credentials"] = [{"provider": "local-a", "api_key_env": "SWITCHBOARD_UPSTREAM_X"}]
    new["orgs"][0]["credentials"] = [{"provider": "local-a", "api_key_env": "SWITCHBOARD_UPSTREAM_Y"}]
    assert [c["path"] for c in diff_documents(old, new)] == ["orgs[acme].credentials[local-a].api_key_env"]


def test_the_first_version_is_compared_with_the_empty_configuration():
    changes = diff_documents(None, doc())
    paths = [c["path"] for c in changes]
    assert "providers[local-a]" in paths and "models[chat-a]" in paths and "orgs[acme]" in paths
    assert diff_documents(None, empty_document()) == []
    assert summarise([]) == "no change to the configuration document"


def test_long_values_are_cut_in_the_rendering():
    new = doc()
    new["models"][0]["upstream_model"] = "x" * 500
    (line,) = render(diff_documents(doc(), new), limit=40)
    assert line.endswith("…") and len(line) < 150
