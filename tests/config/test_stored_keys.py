"""Upstream keys stored encrypted in the database, entered write-only in the admin."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.urls import reverse

from policies.models import Org, OrgCredential
from providers.models import Provider
from routing.config import live
from routing.config.store import dump_yaml, export_document
from routing.plan.chain import link_for
from tests.config.admin_helpers import page_data, set_rows, text

SECRET = "sk-stored-DO-NOT-SHOW-7731"
BYO = "sk-byo-stored-5150"


def change_url(obj):
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


@pytest.fixture
def fernet(settings):
    settings.SWITCHBOARD_FERNET_KEY = Fernet.generate_key().decode()
    return settings


def test_a_key_typed_in_the_admin_is_stored_encrypted_used_and_never_shown_or_exported(admin_client_, imported, fernet):
    provider = Provider.objects.get()
    url = change_url(provider)
    data = page_data(admin_client_.get(url))
    data["api_key"] = SECRET
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)

    provider.refresh_from_db()
    assert provider.api_key_encrypted and SECRET not in provider.api_key_encrypted
    snapshot, errors, _ = live.load_from_db()
    assert errors == [] and snapshot.providers["local-a"].api_key == SECRET  # stored key beats api_key_env

    page = text(admin_client_.get(url))
    assert SECRET not in page and provider.api_key_encrypted not in page
    assert "A key is stored" in page
    exported = dump_yaml(export_document())
    assert "api_key: stored" in exported and SECRET not in exported and provider.api_key_encrypted not in exported

    # saving again with the field left blank keeps the key
    before = provider.api_key_encrypted
    admin_client_.post(url, page_data(admin_client_.get(url)))
    provider.refresh_from_db()
    assert provider.api_key_encrypted == before


def test_an_org_credential_can_store_its_own_key(admin_client_, imported, fernet):
    org = Org.objects.get()
    url = change_url(org)
    data = page_data(admin_client_.get(url))
    set_rows(data, "credentials", [{"provider": Provider.objects.get().pk, "api_key": BYO}])
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)
    assert BYO not in OrgCredential.objects.get().api_key_encrypted
    snapshot, errors, _ = live.load_from_db()
    assert errors == []
    link = link_for(snapshot.orgs["acme"], snapshot.models["chat-a"])
    assert link.api_key == BYO


def test_without_a_fernet_key_the_admin_says_how_to_enable_it(admin_client_, imported, settings):
    settings.SWITCHBOARD_FERNET_KEY = ""
    page = text(admin_client_.get(change_url(Provider.objects.get())))
    assert "SWITCHBOARD_FERNET_KEY" in page and "Fernet.generate_key" in page


def test_an_api_key_in_a_configuration_file_is_refused_unless_it_is_the_stored_reference(fernet):
    from routing.config.validation import validate_document
    from tests.config.conftest import VALID

    doc = {**VALID, "providers": [{**VALID["providers"][0], "api_key": "sk-plain-in-yaml"}]}
    errors = validate_document(doc)
    assert [e.path for e in errors] == ["providers[local-a].api_key"]
    assert "sk-plain-in-yaml" not in errors[0].message
    doc["providers"][0]["api_key"] = "stored"
    assert validate_document(doc) == []
