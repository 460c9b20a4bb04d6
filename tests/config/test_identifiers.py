"""Identifiers and free text in the configuration (docs/security.md#identifiers): character set, NFKC form,
look-alike scripts and length bounds, refused by the one validation with a message saying what to write."""

from __future__ import annotations

import time

import pytest

from routing.config.identifiers import MAX_ID, MAX_PATTERN, identifier_problem, path_problem, text_problem
from routing.config.validation import validate_document, validate_key_controls


def _model(doc, model_id):
    return next(m for m in doc["models"] if m["id"] == model_id)


def _rename_model(doc, new_id):
    _model(doc, "chat-b")["id"] = new_id
    _model(doc, "chat-a")["fallbacks"] = []
    doc["orgs"][0]["policies"][0]["fallback_chain"] = []


def _errors(doc, path):
    return [e for e in validate_document(doc) if e.path == path]


@pytest.mark.parametrize(
    ("model_id", "fragment"),
    [
        ("chat-b\n", "control character U+000A"),
        ("chat\tb", "control character U+0009"),
        ("chat\u200bb", "invisible or direction-changing character U+200B ZERO WIDTH SPACE"),
        ("\u202echat-b", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("chat-\ufeffb", "U+FEFF"),
        ("gpt-4\u043e", "mixes Latin and Cyrillic letters"),  # a Cyrillic o
        ("\u03b1lpha", "mixes Greek and Latin letters"),
        ("\uff43hat-b", "is not in Unicode NFKC form: write it as 'chat-b'"),  # a fullwidth c
        ("x" * (MAX_ID + 1), f"at most {MAX_ID} are allowed"),
    ],
)
def test_model_ids_with_control_invisible_or_look_alike_characters_are_refused(valid_doc, model_id, fragment):
    _rename_model(valid_doc, model_id)
    matching = _errors(valid_doc, f"models[{model_id}].id")
    assert matching and fragment in matching[0].message, [str(e) for e in validate_document(valid_doc)]


@pytest.mark.parametrize("model_id", ["модель-1", "模型-b", "chat-b.v2:latest", "x" * MAX_ID, "anthropic/claude-3"])
def test_ids_in_one_script_or_plain_ascii_are_accepted(valid_doc, model_id):
    _rename_model(valid_doc, model_id)
    assert validate_document(valid_doc) == []


def test_upstream_model_and_alias_names_follow_the_same_rules(valid_doc):
    _model(valid_doc, "chat-a")["upstream_model"] = "gpt-4o\r\nX: 1"
    valid_doc["aliases"]["f\u0430st"] = "chat-a"  # a Cyrillic a
    messages = {e.path: e.message for e in validate_document(valid_doc)}
    assert "control character U+000D" in messages["models[chat-a].upstream_model"]
    assert "mixes Latin and Cyrillic" in messages["aliases[f\u0430st]"]


def test_a_name_with_a_trailing_newline_is_not_a_slug(valid_doc):
    valid_doc["orgs"][0]["name"] = "acme\n"
    valid_doc["providers"][0]["name"] = "local-a\n"
    paths = {e.path for e in validate_document(valid_doc)}
    assert {"orgs[acme\n].name", "providers[local-a\n].name"} <= paths


def test_an_800_kb_pattern_is_refused_at_once_by_its_length(valid_doc):
    valid_doc["orgs"][0]["policies"][0]["pattern"] = "[" + "a-" * 400_000 + "]"
    started = time.perf_counter()
    errors = _errors(valid_doc, "orgs[acme].policies[0].pattern")
    elapsed = time.perf_counter() - started
    assert errors and f"at most {MAX_PATTERN} are allowed" in errors[0].message
    assert elapsed < 0.5


def test_an_org_has_at_most_1000_policies(valid_doc):
    valid_doc["orgs"][0]["policies"] = [{"pattern": f"m-{i}", "action": "allow"} for i in range(1001)]
    (error,) = _errors(valid_doc, "orgs[acme].policies")
    assert "1001 policies; at most 1000" in error.message


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/models\r\nX-Injected: 1", "printable ASCII characters without spaces"),
        ("/models list", "without spaces"),
        ("/m\u00f6dels", "printable ASCII"),
        ("models", "must be a path starting with '/'"),
        ("/" + "m" * 512, "a path has at most 512"),
    ],
)
def test_health_check_path_must_be_a_path(valid_doc, path, fragment):
    valid_doc["providers"][0]["health_check_path"] = path
    (error,) = _errors(valid_doc, "providers[local-a].health_check_path")
    assert fragment in error.message


def test_a_plain_health_check_path_is_accepted(valid_doc):
    valid_doc["providers"][0]["health_check_path"] = "/api/v1/health?full=1"
    assert validate_document(valid_doc) == []
    assert path_problem("") is None


def test_capabilities_given_as_a_list_of_lists_is_a_clean_error(valid_doc):
    _model(valid_doc, "chat-b")["capabilities"] = [["chat"], ["streaming"]]
    errors = _errors(valid_doc, "models[chat-b].capabilities[0]")
    assert errors and "unknown capability ['chat']" in errors[0].message


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        ({"chat-a": ["chat-b"], "chat-b": ["chat-a"]}, "fallback cycle chat-a -> chat-b -> chat-a"),
        (
            {"chat-a": ["chat-b"], "chat-b": ["chat-c"], "chat-c": ["chat-a"]},
            "fallback cycle chat-a -> chat-b -> chat-c -> chat-a",
        ),
        ({"chat-a": ["chat-c"], "chat-b": ["chat-a"], "chat-c": ["chat-b"]}, "chat-a -> chat-c -> chat-b -> chat-a"),
    ],
)
def test_fallback_cycles_of_two_and_three_models_are_refused_naming_the_cycle(valid_doc, links, expected):
    valid_doc["models"].append({"id": "chat-c", "provider": "local-a", "upstream_model": "x", "capabilities": ["chat"]})
    for model_id, fallbacks in links.items():
        _model(valid_doc, model_id)["fallbacks"] = fallbacks
    errors = [e for e in validate_document(valid_doc) if "fallback cycle" in e.message]
    assert len(errors) == 1 and expected in errors[0].message, [str(e) for e in validate_document(valid_doc)]
    assert errors[0].path == "models[chat-a].fallbacks" and errors[0].code == "routing.E002"


def test_a_chain_without_a_loop_is_no_cycle(valid_doc):
    valid_doc["models"].append({"id": "chat-c", "provider": "local-a", "upstream_model": "x", "capabilities": ["chat"]})
    _model(valid_doc, "chat-a")["fallbacks"] = ["chat-b", "chat-c"]
    _model(valid_doc, "chat-b")["fallbacks"] = ["chat-c"]
    assert validate_document(valid_doc) == []


def test_key_patterns_are_bounded_in_number_length_and_characters():
    assert "at most 64 model patterns" in str(validate_key_controls({"models": [f"m-{i}" for i in range(65)]})[0])
    (long,) = validate_key_controls({"models": ["a" * 800_000]})
    assert long.path == "models[0]" and "at most 256" in long.message
    (newline,) = validate_key_controls({"models": ["gpt-*\n"]})
    assert "control character U+000A" in newline.message
    assert validate_key_controls({"models": ["gpt-*", "claude-*"]}) == []


def test_free_text_allows_any_script_but_no_control_or_invisible_characters():
    assert text_problem("maintenance — окно обслуживания 🛠", "the reason") is None
    assert "U+001B" in text_problem("\x1b[31mred", "the reason")
    assert "at most 500" in text_problem("x" * 501, "the reason")
    assert identifier_problem(5, "model id") is None  # types are other rules' business
