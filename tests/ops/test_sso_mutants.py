"""Single sign-on without a provider (docs/sso.md): discovery, account names, groups, org scopes, the
provider's signing key and the redirect to the provider, each checked in process with the provider faked."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.core.exceptions import SuspiciousOperation
from django.test import RequestFactory
from django.urls import include, path

from policies.models import OperatorScope, Org
from routing.ops import sso

ISSUER = "https://idp.example"
DOCUMENT = {
    "issuer": ISSUER,
    "authorization_endpoint": f"{ISSUER}/authorize",
    "token_endpoint": f"{ISSUER}/token",
    "userinfo_endpoint": f"{ISSUER}/userinfo",
    "jwks_uri": f"{ISSUER}/keys",
}
urlpatterns = [path("oidc/", include("mozilla_django_oidc.urls"))]


class Reply:
    """What the faked httpx.get answers: a JSON body, or an error status."""

    def __init__(self, body: Any, status: int = 200) -> None:
        self.body, self.status = body, status

    def raise_for_status(self) -> None:
        if self.status >= 400:
            request = httpx.Request("GET", ISSUER)
            raise httpx.HTTPStatusError("bad", request=request, response=httpx.Response(self.status, request=request))

    def json(self) -> Any:
        return self.body


@pytest.fixture
def provider(monkeypatch):
    """httpx.get answers from `provider["answers"]` by URL; `provider["calls"]` records (url, kwargs)."""
    state: dict[str, Any] = {"answers": {}, "calls": []}

    def get(url: str, **kwargs: Any) -> Reply:
        state["calls"].append((url, kwargs))
        return state["answers"][url]

    monkeypatch.setattr(sso.httpx, "get", get)
    sso.discovery.cache_clear()
    yield state
    sso.discovery.cache_clear()


@pytest.fixture
def oidc(settings, provider):
    settings.SWITCHBOARD_OIDC_ISSUER = ISSUER
    settings.OIDC_RP_CLIENT_ID = "switchboard-admin"
    settings.OIDC_RP_CLIENT_SECRET = "s3cret"
    settings.SWITCHBOARD_OIDC_GROUPS_CLAIM = "groups"
    settings.SWITCHBOARD_OIDC_SUPERUSER_GROUP = "admins"
    settings.SWITCHBOARD_OIDC_ORG_PREFIX = "org:"
    for name in sso.DISCOVERED:
        if hasattr(settings, name):
            delattr(settings, name)
    provider["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(dict(DOCUMENT))
    return provider


# discovery ---------------------------------------------------------------------------------------------


def test_discovery_reads_the_well_known_document_once_without_following_redirects(provider):
    provider["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(dict(DOCUMENT))
    assert sso.discovery(ISSUER + "/") == DOCUMENT
    assert sso.discovery(ISSUER + "/") == DOCUMENT
    assert provider["calls"] == [
        (f"{ISSUER}/.well-known/openid-configuration", {"timeout": 5.0, "follow_redirects": False})
    ]


def test_a_document_naming_another_issuer_is_refused(provider):
    url = f"{ISSUER}/.well-known/openid-configuration"
    provider["answers"][url] = Reply({**DOCUMENT, "issuer": "https://evil.example"})
    with pytest.raises(SuspiciousOperation) as caught:
        sso.fetch_discovery(ISSUER)
    assert str(caught.value) == f"the discovery document at {url} names another issuer: 'https://evil.example'"
    provider["answers"][url] = Reply({**DOCUMENT, "issuer": ISSUER + "/"})
    assert sso.fetch_discovery(ISSUER)["token_endpoint"] == f"{ISSUER}/token"  # a trailing slash is the same one
    provider["answers"][url] = Reply({"token_endpoint": f"{ISSUER}/token"})
    with pytest.raises(SuspiciousOperation, match="names another issuer: None"):
        sso.fetch_discovery(ISSUER)


def test_an_issuer_with_a_path_keeps_every_character_of_it(provider):
    issuer = "https://idp.example/realmX"
    provider["answers"][f"{issuer}/.well-known/openid-configuration"] = Reply({**DOCUMENT, "issuer": issuer})
    assert sso.fetch_discovery(issuer + "/")["issuer"] == issuer
    provider["answers"][f"{issuer}/.well-known/openid-configuration"] = Reply({**DOCUMENT, "issuer": issuer + "/"})
    assert sso.fetch_discovery(issuer)["issuer"] == issuer + "/"


def test_a_provider_answering_an_error_is_an_http_error(provider):
    provider["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply({}, status=503)
    with pytest.raises(httpx.HTTPStatusError):
        sso.fetch_discovery(ISSUER)


def test_endpoints_come_from_discovery_unless_set(oidc, settings):
    assert sso.sso_setting("OIDC_OP_TOKEN_ENDPOINT") == f"{ISSUER}/token"
    assert sso.sso_setting("OIDC_OP_JWKS_ENDPOINT") == f"{ISSUER}/keys"
    settings.OIDC_OP_TOKEN_ENDPOINT = "https://other.example/token"
    assert sso.sso_setting("OIDC_OP_TOKEN_ENDPOINT") == "https://other.example/token"
    assert sso.sso_setting("OIDC_RP_SIGN_ALGO", "RS256") == "RS256"  # not an endpoint: the setting or default
    assert sso.sso_setting("OIDC_RP_CLIENT_ID") == "switchboard-admin"


@pytest.mark.parametrize("value", [None, "ftp://idp.example/keys", 42])
def test_a_missing_or_odd_endpoint_is_refused_by_name(oidc, value):
    document = {**DOCUMENT, "jwks_uri": value}
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(document)
    with pytest.raises(SuspiciousOperation) as caught:
        sso.endpoint("OIDC_OP_JWKS_ENDPOINT")
    assert str(caught.value) == "the OpenID provider's discovery document has no jwks_uri"


def test_a_plain_http_endpoint_is_accepted(oidc):
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply({**DOCUMENT, "jwks_uri": "http://idp/k"})
    assert sso.endpoint("OIDC_OP_JWKS_ENDPOINT") == "http://idp/k"


def test_the_login_page_offers_what_is_configured(settings):
    settings.SWITCHBOARD_OIDC_ISSUER, settings.SWITCHBOARD_PASSWORD_LOGIN = ISSUER, False
    assert sso.login_context(None) == {"switchboard_sso": True, "switchboard_password_login": False}
    settings.SWITCHBOARD_OIDC_ISSUER, settings.SWITCHBOARD_PASSWORD_LOGIN = "", True
    assert sso.login_context(None) == {"switchboard_sso": False, "switchboard_password_login": True}


# claims ------------------------------------------------------------------------------------------------


def test_the_account_name_prefers_username_then_email_then_subject():
    assert sso.username_of({"preferred_username": " alice ", "email": "a@x", "sub": "1"}) == "alice"
    assert sso.username_of({"preferred_username": "  ", "email": "a@x", "sub": "1"}) == "a@x"
    assert sso.username_of({"preferred_username": 7, "sub": "s-1"}) == "s-1"
    assert sso.username_of({"sub": "x" * 200}) == "x" * 150
    with pytest.raises(SuspiciousOperation) as caught:
        sso.username_of({"email": "", "sub": None})
    assert str(caught.value) == "the ID token names no user (no preferred_username, email or sub)"


def test_groups_claim_takes_a_string_or_a_list(settings):
    settings.SWITCHBOARD_OIDC_GROUPS_CLAIM = "roles"
    assert sso.claimed_groups({"roles": "ops"}) == ["ops"]
    assert sso.claimed_groups({"roles": ["ops", 7, None, {"x": 1}, 2.5]}) == ["ops", "7"]
    assert sso.claimed_groups({"groups": ["ignored"]}) == []
    assert sso.claimed_groups({"roles": None}) == []


# accounts ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_first_login_creates_a_staff_account_in_the_claimed_groups(oidc, django_user_model, caplog):
    ops = Group.objects.create(name="ops")
    Org.objects.create(name="acme")
    Org.objects.create(name="globex")
    backend = sso.SwitchboardOIDCBackend()
    claims = {"preferred_username": "alice", "email": "alice@x.example", "groups": ["ops", "unknown", "org:acme"]}
    assert backend.verify_claims(claims) is True
    assert not backend.filter_users_by_claims(claims).exists()
    with caplog.at_level("INFO", logger="switchboard.sso"):
        user = backend.create_user(claims)
    assert caplog.messages == ["sso: created the account alice on its first login"]
    user.refresh_from_db()
    assert (user.username, user.email, user.is_staff, user.is_superuser) == ("alice", "alice@x.example", True, False)
    assert list(user.groups.all()) == [ops]
    assert not user.has_usable_password()
    assert not Group.objects.filter(name="unknown").exists()  # never created from a claim
    assert [o.name for o in OperatorScope.objects.get(user=user).orgs.all()] == ["acme"]
    assert list(backend.filter_users_by_claims(claims)) == [user]


@pytest.mark.django_db
def test_an_account_without_email_or_known_group_is_not_staff(oidc, django_user_model):
    backend = sso.SwitchboardOIDCBackend()
    user = backend.create_user({"sub": "s-9", "groups": ["unknown"]})
    user.refresh_from_db()
    assert (user.username, user.email, user.is_staff, user.is_superuser) == ("s-9", "", False, False)
    assert not OperatorScope.objects.filter(user=user).exists()  # never limited: no scope row
    assert backend.verify_claims({"email": ""}) is False


@pytest.mark.django_db
def test_each_login_sets_groups_superuser_and_email_anew(oidc, django_user_model):
    ops = Group.objects.create(name="ops")
    Group.objects.create(name="admins")
    backend = sso.SwitchboardOIDCBackend()
    user = backend.create_user({"preferred_username": "bob", "email": "b@x", "groups": ["ops"]})
    user = backend.update_user(user, {"preferred_username": "bob", "groups": "admins", "email": "e" * 300})
    user.refresh_from_db()
    assert (user.is_staff, user.is_superuser, user.email) == (True, True, "e" * 254)
    assert [g.name for g in user.groups.all()] == ["admins"]  # ops removed at the provider: removed here
    user = backend.update_user(user, {"preferred_username": "bob", "groups": ["ops"]})
    user.refresh_from_db()
    assert (user.is_staff, user.is_superuser, list(user.groups.all()), user.email) == (True, False, [ops], "e" * 254)


@pytest.mark.django_db
def test_no_superuser_group_configured_makes_no_superuser(oidc, settings, django_user_model):
    settings.SWITCHBOARD_OIDC_SUPERUSER_GROUP = ""
    user = sso.SwitchboardOIDCBackend().create_user({"sub": "carol", "groups": [""]})
    assert (user.is_superuser, user.is_staff) == (False, False)


@pytest.mark.django_db
def test_a_superuser_group_alone_makes_staff(oidc, django_user_model):
    user = sso.SwitchboardOIDCBackend().create_user({"sub": "dave", "groups": ["admins"]})  # no such Group row
    assert (user.is_superuser, user.is_staff, list(user.groups.all())) == (True, True, [])


@pytest.mark.django_db
def test_an_org_scope_once_set_is_never_widened(oidc, settings, django_user_model):
    Org.objects.create(name="acme")
    user = django_user_model.objects.create_user("erin")
    sso.set_org_scope(user, ["org:acme", "org:nowhere", "ops"])
    scope = OperatorScope.objects.get(user=user)
    assert [o.name for o in scope.orgs.all()] == ["acme"]
    sso.set_org_scope(user, ["ops"])
    assert OperatorScope.objects.filter(user=user).count() == 1
    assert list(OperatorScope.objects.get(user=user).orgs.all()) == []  # limited to nothing, not to everything
    settings.SWITCHBOARD_OIDC_ORG_PREFIX = ""
    other = django_user_model.objects.create_user("frank")
    sso.set_org_scope(other, ["acme"])  # no prefix configured: no org scopes from claims
    assert not OperatorScope.objects.filter(user=other).exists()


def test_the_backend_reads_its_settings_and_endpoints_lazily(oidc, settings):
    settings.OIDC_RP_SIGN_ALGO = "ES256"
    settings.OIDC_RP_IDP_SIGN_KEY = "-----BEGIN PUBLIC KEY-----"
    assert sso.SwitchboardOIDCBackend().OIDC_RP_IDP_SIGN_KEY == "-----BEGIN PUBLIC KEY-----"
    del settings.OIDC_RP_IDP_SIGN_KEY
    backend = sso.SwitchboardOIDCBackend()
    assert oidc["calls"] == []  # building the backend never reaches the provider
    assert (backend.OIDC_RP_CLIENT_ID, backend.OIDC_RP_CLIENT_SECRET) == ("switchboard-admin", "s3cret")
    assert (backend.OIDC_RP_SIGN_ALGO, backend.OIDC_RP_IDP_SIGN_KEY) == ("ES256", None)
    del settings.OIDC_RP_SIGN_ALGO
    assert sso.SwitchboardOIDCBackend().OIDC_RP_SIGN_ALGO == "RS256"
    assert backend.OIDC_OP_TOKEN_ENDPOINT == f"{ISSUER}/token"
    assert backend.OIDC_OP_USER_ENDPOINT == f"{ISSUER}/userinfo"
    assert backend.OIDC_OP_JWKS_ENDPOINT == f"{ISSUER}/keys"
    assert backend.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT") == f"{ISSUER}/authorize"
    assert backend.get_settings("OIDC_STATE_SIZE", 32) == 32


# the provider's signing key ----------------------------------------------------------------------------


def _key(kid: str | None = None, **extra: Any) -> dict[str, Any]:
    key = {"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA", **extra}
    if kid is not None:
        key["kid"] = kid
    return key


def _token(**headers: Any) -> str:
    return jwt.encode({"sub": "x"}, "secret-secret-secret-secret-secret", algorithm="HS256", headers=headers)


def _match(oidc, settings, keys: Any, token: str) -> Any:
    settings.OIDC_TIMEOUT = 7
    oidc["answers"][f"{ISSUER}/keys"] = keys if isinstance(keys, Reply) else Reply(keys)
    return sso.SwitchboardOIDCBackend().retrieve_matching_jwk(token)


def test_the_signing_key_is_chosen_by_kid(oidc, settings):
    keys = {"keys": [_key("a"), _key("b"), "junk"]}
    assert _match(oidc, settings, keys, _token(kid="b")).key_id == "b"
    assert oidc["calls"][-1] == (f"{ISSUER}/keys", {"timeout": 7})


def test_without_kid_the_one_key_of_the_tokens_algorithm_is_used(oidc, settings):
    keys = {"keys": [_key("rsa", alg="RS256"), _key("enc", use="enc"), _key("mine", alg="HS256", use="sig")]}
    assert _match(oidc, settings, keys, _token()).key_id == "mine"


def test_the_timeout_defaults_to_the_discovery_timeout(oidc, settings):
    oidc["answers"][f"{ISSUER}/keys"] = Reply({"keys": [_key("a")]})
    sso.SwitchboardOIDCBackend().retrieve_matching_jwk(_token())
    assert oidc["calls"][-1] == (f"{ISSUER}/keys", {"timeout": 5.0})


@pytest.mark.parametrize(
    ("keys", "headers", "count"),
    [
        ({"keys": [_key("a"), _key("b")]}, {}, 2),
        ({"keys": [_key("a")]}, {"kid": "z"}, 0),
        ({"keys": None}, {}, 0),
        ({}, {}, 0),
    ],
)
def test_no_single_matching_key_is_refused(oidc, settings, keys, headers, count):
    with pytest.raises(SuspiciousOperation) as caught:
        _match(oidc, settings, keys, _token(**headers))
    assert str(caught.value) == f"the provider's JWKS has {count} keys for this token, not one"


def test_a_keys_endpoint_answering_an_error_fails_the_login(oidc, settings):
    with pytest.raises(httpx.HTTPStatusError):
        _match(oidc, settings, Reply({"keys": [_key("a")]}, status=500), _token())


# the redirect to the provider --------------------------------------------------------------------------


def _login_request():
    request = RequestFactory().get("/oidc/authenticate/")
    request.session = SessionStore()
    return request


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_the_login_redirects_to_the_discovered_authorization_endpoint(oidc):
    view = sso.SwitchboardAuthenticationRequestView()
    assert oidc["calls"] == []  # built without reaching the provider
    response = view.get(_login_request())
    url = urlsplit(response["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{ISSUER}/authorize"
    assert parse_qs(url.query)["client_id"] == ["switchboard-admin"]


@pytest.mark.django_db
@pytest.mark.urls(__name__)
@pytest.mark.parametrize(
    "trouble",
    [
        httpx.ConnectError("refused"),
        SuspiciousOperation("odd"),
        ValueError("not json"),
    ],
)
def test_an_unreachable_provider_sends_the_user_back_to_the_login_page(oidc, monkeypatch, caplog, trouble):
    def fails(issuer: str) -> dict:
        raise trouble

    monkeypatch.setattr(sso, "fetch_discovery", fails)
    with caplog.at_level("WARNING", logger="switchboard.sso"):
        response = sso.SwitchboardAuthenticationRequestView().get(_login_request())
    assert (response.status_code, response["Location"]) == (302, "/admin/login/?sso=unreachable")
    assert caplog.messages == [f"sso: the OpenID provider could not be reached: {trouble}"]


def test_the_login_view_takes_as_views_arguments(oidc):
    view = sso.SwitchboardAuthenticationRequestView(redirect_field_name="then")
    assert (view.redirect_field_name, view.OIDC_RP_CLIENT_ID) == ("then", "switchboard-admin")


# logging out at the provider ---------------------------------------------------------------------------


def _logout_request(id_token: Any):
    request = RequestFactory().post("/admin/logout/")
    request.session = SessionStore()
    if id_token is not None:
        request.session[sso.ID_TOKEN_KEY] = id_token
    return request


@pytest.mark.django_db
def test_an_end_session_endpoint_with_a_query_gets_more_parameters(oidc, settings):
    settings.LOGOUT_REDIRECT_URL = "/admin/login/"
    document = {**DOCUMENT, "end_session_endpoint": f"{ISSUER}/logout?tenant=t1"}
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(document)
    url = urlsplit(sso.provider_logout_url(_logout_request(None)))
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{ISSUER}/logout"
    assert parse_qs(url.query) == {
        "tenant": ["t1"],
        "post_logout_redirect_uri": ["http://testserver/admin/login/"],
        "client_id": ["switchboard-admin"],
    }  # no ID token in the session: no hint


@pytest.mark.django_db
@pytest.mark.parametrize("end", ["javascript:alert(1)", 42, None])
def test_an_odd_end_session_endpoint_logs_out_here_only(oidc, settings, end):
    settings.LOGOUT_REDIRECT_URL = "/admin/login/"
    document = {**DOCUMENT, "end_session_endpoint": end}
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(document)
    assert sso.provider_logout_url(_logout_request("the.id.token")) == "/admin/login/"


@pytest.mark.django_db
def test_a_plain_http_end_session_endpoint_and_an_odd_token(oidc, settings):
    settings.LOGOUT_REDIRECT_URL = "/admin/login/"
    document = {**DOCUMENT, "end_session_endpoint": "http://idp/logout"}
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(document)
    url = urlsplit(sso.provider_logout_url(_logout_request(12345)))
    assert (url.netloc, url.path) == ("idp", "/logout")
    assert "id_token_hint" not in parse_qs(url.query)
    assert "id_token_hint" not in parse_qs(urlsplit(sso.provider_logout_url(_logout_request(""))).query)


@pytest.mark.django_db
def test_an_unreachable_provider_at_logout_is_logged_and_the_session_ends_here(oidc, settings, caplog):
    settings.LOGOUT_REDIRECT_URL = "/bye/"
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply({}, status=502)
    with caplog.at_level("WARNING", logger="switchboard.sso"):
        assert sso.provider_logout_url(_logout_request("t")) == "/bye/"
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("sso: logged out here only, the OpenID provider could not be reached: ")
    assert caplog.messages[0].endswith(": bad")  # the error itself, for the operator


@pytest.mark.django_db
def test_the_logout_redirect_defaults_to_the_admin_login(oidc, settings):
    if hasattr(settings, "LOGOUT_REDIRECT_URL"):
        del settings.LOGOUT_REDIRECT_URL
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply({**DOCUMENT, "issuer": "https://x"})
    assert sso.provider_logout_url(_logout_request("t")) == "/admin/login/"


@pytest.mark.django_db
def test_a_get_or_a_password_session_uses_the_admins_own_logout(oidc):
    calls = []

    class Site:
        def logout(self, request):
            calls.append(request.method)
            return "own"

    logout = sso.admin_logout(Site())
    get = RequestFactory().get("/admin/logout/")
    get.session = SessionStore()
    get.session[sso.ID_TOKEN_KEY] = "the.id.token"
    assert logout(get) == "own"
    assert logout(_logout_request(None)) == "own"
    assert calls == ["GET", "POST"]


@pytest.mark.django_db
def test_a_posted_logout_of_an_sso_session_goes_through_the_provider(oidc, settings, django_user_model):
    settings.OIDC_OP_LOGOUT_URL_METHOD = "routing.ops.sso.provider_logout_url"
    settings.LOGOUT_REDIRECT_URL = "/admin/login/"
    document = {**DOCUMENT, "end_session_endpoint": f"{ISSUER}/end"}
    oidc["answers"][f"{ISSUER}/.well-known/openid-configuration"] = Reply(document)
    request = _logout_request("the.id.token")
    request.user = django_user_model.objects.create_user("gina")
    response = sso.admin_logout(None)(request)
    url = urlsplit(response["Location"])
    assert (response.status_code, f"{url.scheme}://{url.netloc}{url.path}") == (302, f"{ISSUER}/end")
    assert parse_qs(url.query)["id_token_hint"] == ["the.id.token"]
    assert sso.ID_TOKEN_KEY not in request.session  # the Switchboard session ended too
