"""Single sign-on for the admin and the staff pages: OpenID Connect (docs/sso.md).

mozilla-django-oidc speaks the protocol (authorization code flow with PKCE, ID-token signature
checked against the provider's JWKS, the userinfo call). This module adds what it leaves out:

- **issuer discovery**: the provider's endpoints come from `<issuer>/.well-known/openid-configuration`,
  read once per process with a timeout and kept; a provider that cannot be reached makes the SSO
  login fail with a message on the login page, never the password login or the gateway;
- **accounts created on first login**, named by the `preferred_username` claim (else the e-mail,
  else the subject), matched by that name on later logins;
- **groups**: the values of the groups claim (`SWITCHBOARD_OIDC_GROUPS_CLAIM`, default `groups`)
  that name an existing Django group are the user's groups, set anew at every login (a group
  removed at the provider is removed here); a user with at least one is staff; a value equal to
  `SWITCHBOARD_OIDC_SUPERUSER_GROUP` (when set) makes a superuser. Groups are never created from
  claims: an operator creates them, with their permissions, in the admin;
- **org scopes**: group values `org:<name>` (`SWITCHBOARD_OIDC_ORG_PREFIX`) limit the user to those orgs,
  as `manage.py create_operator --org` does (docs/operations.md#org-scoped-staff);
- **logout at the provider**: the admin's *Log out* of a user who signed in through the provider ends the
  provider's session too when its discovery document names an `end_session_endpoint` (RP-initiated
  logout: `id_token_hint`, `post_logout_redirect_uri` back to the admin's login page).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, resolve_url
from django.views import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationRequestView, OIDCLogoutView

from policies.models import OperatorScope, Org

log = logging.getLogger("switchboard.sso")
DISCOVERY_TIMEOUT_S = 5.0
ID_TOKEN_KEY = "oidc_id_token"  # where mozilla-django-oidc keeps the ID token (OIDC_STORE_ID_TOKEN)
# mozilla-django-oidc's endpoint settings, and the discovery document's names for them.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


@functools.cache
def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document, read once per process (a failure is not kept: tried again)."""
    return fetch_discovery(issuer)


def endpoint(setting: str) -> str:
    value = discovery(str(settings.SWITCHBOARD_OIDC_ISSUER)).get(DISCOVERED[setting])
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise SuspiciousOperation(f"the OpenID provider's discovery document has no {DISCOVERED[setting]}")
    return value


def fetch_discovery(issuer: str) -> dict[str, Any]:
    """`<issuer>/.well-known/openid-configuration`, checked to name this issuer."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    response = httpx.get(url, timeout=DISCOVERY_TIMEOUT_S, follow_redirects=False)
    response.raise_for_status()
    document = response.json()
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise SuspiciousOperation(f"the discovery document at {url} names another issuer: {document.get('issuer')!r}")
    return document


def sso_setting(attr: str, *args: Any) -> Any:
    """mozilla-django-oidc's settings, with the endpoints from discovery."""
    if attr in DISCOVERED and not getattr(settings, attr, None):
        return endpoint(attr)
    return import_from_settings(attr, *args)


def login_context(request: Any) -> dict[str, bool]:
    """For the login page's template: whether single sign-on is offered, and the password form."""
    return {
        "switchboard_sso": bool(settings.SWITCHBOARD_OIDC_ISSUER),
        "switchboard_password_login": bool(settings.SWITCHBOARD_PASSWORD_LOGIN),
    }


def username_of(claims: dict[str, Any]) -> str:
    for claim in ("preferred_username", "email", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()[:150]
    raise SuspiciousOperation("the ID token names no user (no preferred_username, email or sub)")


def claimed_groups(claims: dict[str, Any]) -> list[str]:
    raw = claims.get(settings.SWITCHBOARD_OIDC_GROUPS_CLAIM)
    if isinstance(raw, str):
        raw = [raw]
    return [str(g) for g in raw or [] if isinstance(g, str | int)]


def set_org_scope(user: Any, claimed: list[str]) -> None:
    """Group values `<SWITCHBOARD_OIDC_ORG_PREFIX><org>` limit the user to those orgs (an OperatorScope);
    a user once limited whose claims now name no org keeps a scope with no org: a claim removed at the
    provider never widens what someone sees."""
    prefix = settings.SWITCHBOARD_OIDC_ORG_PREFIX
    names = [value[len(prefix) :] for value in claimed if prefix and value.startswith(prefix)]
    scope = OperatorScope.objects.filter(user=user).first()
    if not names and scope is None:
        return  # never limited: staff of every org, as a password account without a scope
    if scope is None:
        scope = OperatorScope.objects.create(user=user)
    scope.orgs.set(Org.objects.filter(name__in=names))


class SwitchboardOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with discovery, user names and group mapping (module docstring).

    Django builds every backend on each login and each session read, so nothing here may reach the
    provider when built: the endpoints are read from discovery when a login uses them, and a provider
    that is down never breaks a password login or a signed-in page.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107 - the parent's, without the endpoints
        self.OIDC_RP_CLIENT_ID = sso_setting("OIDC_RP_CLIENT_ID")
        self.OIDC_RP_CLIENT_SECRET = sso_setting("OIDC_RP_CLIENT_SECRET")
        self.OIDC_RP_SIGN_ALGO = sso_setting("OIDC_RP_SIGN_ALGO", "RS256")
        self.OIDC_RP_IDP_SIGN_KEY = sso_setting("OIDC_RP_IDP_SIGN_KEY", None)
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the parent's attribute name
        return sso_setting("OIDC_OP_TOKEN_ENDPOINT")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return sso_setting("OIDC_OP_USER_ENDPOINT")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return sso_setting("OIDC_OP_JWKS_ENDPOINT")

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return sso_setting(attr, *args)

    def retrieve_matching_jwk(self, token: Any) -> Any:
        """The provider's signing key for `token`: by `kid` when the token names one (the parent's rule),
        else the one key of the token's algorithm (providers with a single key often send no `kid`)."""
        response = httpx.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=sso_setting("OIDC_TIMEOUT", DISCOVERY_TIMEOUT_S))
        response.raise_for_status()
        header = jwt.get_unverified_header(token)
        keys = [k for k in response.json().get("keys") or [] if isinstance(k, dict)]
        keys = [
            k for k in keys if k.get("alg", header.get("alg")) == header.get("alg") and k.get("use", "sig") == "sig"
        ]
        if "kid" in header:
            keys = [k for k in keys if k.get("kid") == header["kid"]]
        if len(keys) != 1:
            raise SuspiciousOperation(f"the provider's JWKS has {len(keys)} keys for this token, not one")
        return jwt.PyJWK(keys[0])

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(username=username_of(claims))

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        try:
            username_of(claims)
        except SuspiciousOperation:
            return False
        return True

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = self.UserModel.objects.create_user(username_of(claims), email=str(claims.get("email") or ""))
        log.info("sso: created the account %s on its first login", user.get_username())
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        names = claimed_groups(claims)
        groups = list(Group.objects.filter(name__in=names))
        superuser_group = settings.SWITCHBOARD_OIDC_SUPERUSER_GROUP
        user.is_superuser = bool(superuser_group) and superuser_group in names
        user.is_staff = user.is_superuser or bool(groups)
        if claims.get("email"):
            user.email = str(claims["email"])[:254]
        user.set_unusable_password()  # an SSO account never signs in with a password
        user.save()
        user.groups.set(groups)
        set_org_scope(user, names)
        return user


class SwitchboardAuthenticationRequestView(OIDCAuthenticationRequestView):
    """The redirect to the provider, its authorization endpoint from discovery; a provider that cannot
    be reached sends the user back to the login page with a message, not a 500."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        View.__init__(self, *args, **kwargs)
        self.OIDC_RP_CLIENT_ID = sso_setting("OIDC_RP_CLIENT_ID")

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return sso_setting(attr, *args)

    def get(self, request: Any) -> Any:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = sso_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
            return super().get(request)
        except (httpx.HTTPError, SuspiciousOperation, ValueError) as exc:
            log.warning("sso: the OpenID provider could not be reached: %s", exc)
            return redirect("/admin/login/?sso=unreachable")


def provider_logout_url(request: HttpRequest) -> str:
    """Where logging out sends the browser (mozilla-django-oidc's OIDC_OP_LOGOUT_URL_METHOD): the provider's
    `end_session_endpoint` with the session's ID token as `id_token_hint` and the admin's login page as
    `post_logout_redirect_uri`; the login page itself when the provider names no such endpoint or cannot be
    reached (the Switchboard session ends either way). Discovery is read here, on the first logout that
    needs it, as for a login: never at start."""
    back = resolve_url(sso_setting("LOGOUT_REDIRECT_URL", "/admin/login/"))
    try:
        end = discovery(str(settings.SWITCHBOARD_OIDC_ISSUER)).get("end_session_endpoint")
    except (httpx.HTTPError, SuspiciousOperation, ValueError) as exc:
        log.warning("sso: logged out here only, the OpenID provider could not be reached: %s", exc)
        return back
    if not isinstance(end, str) or not end.startswith(("https://", "http://")):
        return back
    params = {
        "post_logout_redirect_uri": request.build_absolute_uri(back),
        "client_id": sso_setting("OIDC_RP_CLIENT_ID"),
    }
    id_token = request.session.get(ID_TOKEN_KEY)
    if isinstance(id_token, str) and id_token:
        params["id_token_hint"] = id_token
    return f"{end}{'&' if '?' in end else '?'}{urlencode(params)}"


def admin_logout(site: Any) -> Callable[[HttpRequest], HttpResponse]:
    """The admin's *Log out*: through the provider for a session signed in by it (provider_logout_url),
    the admin's own logout for everyone else (a password login)."""
    through_provider = OIDCLogoutView.as_view()

    def logout(request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.session.get(ID_TOKEN_KEY):
            return through_provider(request)
        return site.logout(request)

    return logout
