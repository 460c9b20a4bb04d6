"""Logging out of the admin after a single sign-on ends the provider's session too (docs/sso.md#logout):
RP-initiated logout at the provider's end_session_endpoint, read from discovery when a logout needs it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib import admin
from django.urls import path

from routing.ops import sso

ISSUER = "https://idp.example"
urlpatterns = [path("admin/logout/", sso.admin_logout(admin.site)), path("admin/", admin.site.urls)]


@pytest.fixture
def oidc(settings, monkeypatch):
    settings.SWITCHBOARD_OIDC_ISSUER = ISSUER
    settings.OIDC_RP_CLIENT_ID = "switchboard-admin"
    settings.LOGOUT_REDIRECT_URL = "/admin/login/"
    settings.OIDC_OP_LOGOUT_URL_METHOD = "routing.ops.sso.provider_logout_url"
    document = {"issuer": ISSUER, "end_session_endpoint": f"{ISSUER}/oauth2/end_session"}
    monkeypatch.setattr(sso, "discovery", lambda issuer: document if issuer == ISSUER else {})
    return document


def _signed_in(client, django_user_model, id_token: str | None):
    user = django_user_model.objects.create_user("alice", is_staff=True)
    client.force_login(user)
    if id_token is not None:
        session = client.session
        session[sso.ID_TOKEN_KEY] = id_token
        session.save()


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_the_admins_logout_sends_an_sso_session_to_the_providers_end_session_endpoint(oidc, client, django_user_model):
    _signed_in(client, django_user_model, "the.id.token")
    response = client.post("/admin/logout/")
    assert response.status_code == 302
    url = urlsplit(response["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{ISSUER}/oauth2/end_session"
    assert parse_qs(url.query) == {
        "id_token_hint": ["the.id.token"],
        "post_logout_redirect_uri": ["http://testserver/admin/login/"],
        "client_id": ["switchboard-admin"],
    }
    assert client.get("/admin/").status_code == 302  # the Switchboard session ended too
    assert sso.ID_TOKEN_KEY not in client.session


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_password_session_logs_out_here_only(oidc, client, django_user_model):
    _signed_in(client, django_user_model, None)
    response = client.post("/admin/logout/")
    assert (response.status_code, response["Location"]) == (302, "/admin/login/")  # the admin's own, as before
    assert client.get("/admin/").status_code == 302


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_provider_without_end_session_or_unreachable_ends_the_session_here(
    oidc, client, django_user_model, monkeypatch
):
    del oidc["end_session_endpoint"]
    _signed_in(client, django_user_model, "the.id.token")
    response = client.post("/admin/logout/")
    assert (response.status_code, response["Location"]) == (302, "/admin/login/")

    def down(issuer: str) -> dict:
        raise httpx.ConnectError("refused")

    monkeypatch.setattr(sso, "discovery", down)
    client.force_login(django_user_model.objects.get(username="alice"))
    session = client.session
    session[sso.ID_TOKEN_KEY] = "the.id.token"
    session.save()
    response = client.post("/admin/logout/")
    assert (response.status_code, response["Location"]) == (302, "/admin/login/")
    assert client.get("/admin/").status_code == 302


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_a_logout_is_a_post_with_the_csrf_token(oidc, django_user_model):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    _signed_in(strict, django_user_model, "the.id.token")
    assert strict.post("/admin/logout/").status_code == 403  # a cross-site form cannot log anyone out
    assert "_auth_user_id" in strict.session and strict.session[sso.ID_TOKEN_KEY] == "the.id.token"


def test_discovery_is_not_read_when_the_urls_are_built(settings, monkeypatch):
    settings.SWITCHBOARD_OIDC_ISSUER = ISSUER
    calls = []
    monkeypatch.setattr(sso, "fetch_discovery", lambda issuer: calls.append(issuer) or {})
    sso.discovery.cache_clear()
    sso.admin_logout(admin.site)
    assert calls == []
