"""Every rule of routing.config.validation, through validate_document and the field validators."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from routing.config.store import load_yaml
from routing.config.validation import (
    ConfigError,
    validate_base_url,
    validate_document,
    validate_env_name,
    validate_pattern,
    validate_timeout_ms,
)
from tests.config.cases import CASE_IDS, CASES


def test_valid_document_has_no_errors(valid_doc):
    assert validate_document(valid_doc) == []


def test_demo_fixture_and_contract_extras_are_valid(valid_doc):
    demo = Path(__file__).resolve().parents[2] / "routing" / "fixtures" / "demo.yaml"
    assert validate_document(load_yaml(demo.read_text())) == []
    valid_doc["providers"][0].update(health_check_path="/models", health_probe=True, total_timeout_ms=60000)
    valid_doc["orgs"][0]["credentials"] = [
        {"provider": "local-a", "api_key_env": "SWITCHBOARD_UPSTREAM_ACME", "base_url": "https://byo.example.com/v1"}
    ]
    valid_doc["models"][1].update(fallback_on=["timeout", "context_length"], input_price_per_mtok=0.15, residency="eu")
    assert validate_document(valid_doc) == []


@pytest.mark.parametrize(("case", "mutate", "path", "fragment", "code"), CASES, ids=CASE_IDS)
def test_rule(valid_doc, case, mutate, path, fragment, code):
    mutate(valid_doc)
    errors = validate_document(valid_doc)
    matching = [e for e in errors if e.path == path and fragment in e.message]
    assert matching, f"expected {path}: ...{fragment}... in {[str(e) for e in errors]}"
    assert matching[0].code == code


def test_every_error_is_reported_not_just_the_first(valid_doc):
    valid_doc["providers"][0]["base_url"] = "ftp://x"
    valid_doc["orgs"][0]["policies"][0]["pattern"] = "["
    valid_doc["models"][0]["fallbacks"] = ["chat-a"]
    paths = {e.path for e in validate_document(valid_doc)}
    assert {"providers[local-a].base_url", "orgs[acme].policies[0].pattern", "models[chat-a].fallbacks[0]"} <= paths


def test_fallback_naming_an_alias_says_which_model_to_use(valid_doc):
    valid_doc["models"][1]["fallbacks"] = ["fast"]
    valid_doc["models"][1]["capabilities"] = ["chat"]
    (error,) = validate_document(valid_doc)
    assert error.path == "models[chat-b].fallbacks[0]"
    assert "alias 'fast'" in error.message and "use 'chat-a'" in error.message


def test_capability_mismatch_names_every_missing_endpoint_kind(valid_doc):
    valid_doc["models"][0]["capabilities"] = ["chat", "embeddings", "rerank"]
    (error,) = validate_document(valid_doc)
    assert "does not serve embeddings, rerank" in error.message


def test_non_mapping_document():
    assert validate_document(["providers"]) == [
        ConfigError("<document>", "the configuration must be a mapping (key: value), got a list")
    ]


def test_api_key_env_must_be_a_name_not_a_secret(valid_doc):
    valid_doc["providers"][0]["api_key_env"] = "sk-live 1234"
    (error,) = validate_document(valid_doc)
    assert error.path == "providers[local-a].api_key_env" and "never the key itself" in error.message


@pytest.mark.parametrize(
    ("validator", "bad", "good", "fragment"),
    [
        (validate_base_url, "ftp://example.com", "https://api.example.com/v1", "is not an http(s) URL"),
        (validate_base_url, "http://", "http://127.0.0.1:9001", "with a host"),
        (validate_pattern, "chat-[a-", "chat-[a-z]*", "malformed pattern"),
        (validate_timeout_ms, 0, 5000, "positive whole number of milliseconds"),
        (validate_env_name, "my key", "SWITCHBOARD_UPSTREAM_LOCAL_A", "not an environment variable name"),
    ],
)
def test_field_validators_share_the_document_messages(validator, bad, good, fragment):
    validator(good)
    with pytest.raises(ValidationError) as exc:
        validator(bad)
    assert fragment in exc.value.messages[0]
