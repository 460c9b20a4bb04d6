"""A bedrock provider configured in the admin: its AWS credentials stored encrypted, its region checked."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.urls import reverse

from providers.models import Provider
from routing.config import live
from routing.upstream.dialects import get_dialect
from tests.config.admin_helpers import page_data, text

KEY_ID, SECRET, TOKEN = "ASIASTOREDEXAMPLE", "stored/Secret+DO-NOT-SHOW-4411", "stored-session-token-8821"


@pytest.fixture
def fernet(settings):
    settings.SWITCHBOARD_FERNET_KEY = Fernet.generate_key().decode()
    return settings


def test_stored_aws_credentials_sign_requests_and_are_never_shown(admin_client_, imported, fernet):
    provider = Provider.objects.get()
    url = reverse("admin:providers_provider_change", args=[provider.pk])
    data = page_data(admin_client_.get(url))
    data.update(dialect="bedrock", base_url="https://bedrock-runtime.eu-west-1.amazonaws.com")
    data["api_key"] = f"{KEY_ID}:{SECRET}:{TOKEN}"
    data["api_key_env"] = ""
    response = admin_client_.post(url, data)
    assert response.status_code == 302, text(response)

    snapshot, errors, _ = live.load_from_db()
    assert errors == []
    spec = snapshot.providers[provider.name]
    model = next(m for m in snapshot.models.values() if m.provider.name == provider.name)
    prepared = get_dialect("bedrock").build_request(
        "chat", {"messages": [{"role": "user", "content": "hi"}]}, model, spec.base_url, spec.api_key, False
    )
    auth = prepared.headers["Authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/") and "/eu-west-1/bedrock/aws4_request" in auth
    assert prepared.headers["X-Amz-Security-Token"] == TOKEN
    assert SECRET not in " ".join(prepared.headers.values())  # only the signature travels
    page = text(admin_client_.get(url))
    assert SECRET not in page and TOKEN not in page


def test_the_admin_refuses_a_bedrock_provider_without_a_region(admin_client_, imported):
    provider = Provider.objects.get()
    url = reverse("admin:providers_provider_change", args=[provider.pk])
    data = page_data(admin_client_.get(url))
    data.update(dialect="bedrock", base_url="https://bedrock-proxy.example.com")
    response = admin_client_.post(url, data)
    assert response.status_code == 200
    assert "names no AWS region" in text(response)
    provider.refresh_from_db()
    assert provider.dialect != "bedrock"
