"""Secrets: configuration may name only allowed environment variables, URLs never print credentials."""

from __future__ import annotations

import copy
import socket

import pytest

from routing.config.secrets import redact_url
from routing.config.snapshot import build_snapshot
from routing.config.store import ConfigInvalid, import_document
from routing.config.validation import validate_document
from routing.core.failures import UpstreamFailure
from routing.upstream.transport import Transport
from tests.config.conftest import VALID
from tests.upstream.conftest import provider

ENV = {"SECRET_KEY": "django-secret", "DATABASE_URL": "postgres://u:dbpass@h/db", "SWITCHBOARD_UPSTREAM_LOCAL_A": "k"}


def _doc(provider_env: str | None = None, credential_env: str | None = None) -> dict:
    doc = copy.deepcopy(VALID)
    if provider_env is not None:
        doc["providers"][0]["api_key_env"] = provider_env
    if credential_env is not None:
        doc["orgs"][0]["credentials"] = [
            {"provider": "local-a", "api_key_env": credential_env, "base_url": "http://attacker.example/v1"}
        ]
    return doc


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (_doc(provider_env="SECRET_KEY"), "providers[local-a].api_key_env"),
        (_doc(credential_env="DATABASE_URL"), "orgs[acme].credentials[local-a].api_key_env"),
    ],
    ids=["provider", "org-credential"],
)
def test_an_environment_variable_outside_the_allow_prefix_is_refused_naming_the_field(doc, path):
    errors = validate_document(doc)
    assert [e.path for e in errors] == [path]
    message = errors[0].message
    assert "SWITCHBOARD_UPSTREAM_" in message and "SWITCHBOARD_SECRET_ENV_ALLOW" in message


def test_the_allow_list_and_the_prefix_setting_admit_other_names(settings):
    settings.SWITCHBOARD_SECRET_ENV_ALLOW = "LEGACY_OPENAI_KEY, OTHER"
    assert validate_document(_doc(provider_env="LEGACY_OPENAI_KEY")) == []
    settings.SWITCHBOARD_SECRET_ENV_PREFIX = "ACME_UP_"
    assert validate_document(_doc(provider_env="ACME_UP_PLATFORM", credential_env="ACME_UP_BYO")) == []
    assert [e.path for e in validate_document(_doc())] == ["providers[local-a].api_key_env"]  # old prefix now refused


def test_the_snapshot_never_reads_a_refused_variable_even_from_an_unvalidated_document():
    snap = build_snapshot(_doc(provider_env="SECRET_KEY", credential_env="DATABASE_URL"), [], ENV)
    assert snap.providers["local-a"].api_key is None
    assert snap.orgs["acme"].credentials["local-a"].api_key is None
    allowed = build_snapshot(_doc(), [], ENV)
    assert allowed.providers["local-a"].api_key == "k"


@pytest.mark.django_db
def test_import_refuses_a_credential_naming_the_django_secret_key():
    with pytest.raises(ConfigInvalid) as info:
        import_document(_doc(credential_env="SECRET_KEY"))
    assert "orgs[acme].credentials[local-a].api_key_env" in str(info.value)


def test_a_base_url_with_credentials_is_refused_without_printing_the_password():
    doc = copy.deepcopy(VALID)
    doc["providers"][0]["base_url"] = "http://user:hunter2@127.0.0.1:9001/v1"
    errors = validate_document(doc)
    assert [e.path for e in errors] == ["providers[local-a].base_url"]
    assert "credentials" in errors[0].message and "hunter2" not in errors[0].message


def test_redact_url_drops_userinfo_query_and_fragment():
    assert redact_url("https://u:p@api.example.com:8443/v1/chat?key=sk-1#x") == "https://api.example.com:8443/v1/chat"
    assert redact_url("http://[::1]:9001/v1") == "http://[::1]:9001/v1"
    assert redact_url("http://127.0.0.1/v1") == "http://127.0.0.1/v1"


async def test_a_connect_error_names_the_provider_to_clients_and_logs_the_url_without_password_or_query(caplog):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://user:hunter2@127.0.0.1:{port}/v1/chat/completions?api-key=sk-q"
    transport = Transport()
    try:
        with pytest.raises(UpstreamFailure) as info:
            # Its own provider name: the warning is throttled per provider (docs/security.md#urls),
            # and another test's unreachable default provider may have logged within the window.
            await transport.send(provider("secrets-unreachable", base_url=url), "POST", url, {}, b"{}", 1.0)
    finally:
        await transport.aclose()
    message = str(info.value)
    assert "127.0.0.1" not in message and "hunter2" not in message and "sk-q" not in message  # docs/security.md
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "switchboard.upstream")
    assert f"127.0.0.1:{port}/v1/chat/completions" in logged  # the operator sees where
    assert "hunter2" not in logged and "sk-q" not in logged
