"""Single sign-on end to end: a real OpenID provider (oidc-provider-mock, authlib underneath: discovery,
RS256 ID tokens, JWKS, userinfo) in its own process, a real gateway process configured with
SWITCHBOARD_OIDC_*, and headless Chromium clicking through the login. The account is created on
first login with the provider's groups mapped to existing Django groups, and logging out goes through
the provider's end-session endpoint back to the login page; with password login off, the password form
is gone and a password POST is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium
from tests.e2e.harness import free_port, wait_for_port

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: sso-model
    provider: mock
    upstream_model: up-sso
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""
GROUPS = """
from django.contrib.auth.models import Group, Permission
sre = Group.objects.create(name="sre")
sre.permissions.add(Permission.objects.get(codename="view_org"))
"""
READ_USER = """
import json
from django.contrib.auth import get_user_model
u = get_user_model().objects.get(username="alice")
print("USER", json.dumps({"orgs": sorted(o.name for o in u.operator_scope.orgs.all()) if hasattr(u, "operator_scope") else None, "staff": u.is_staff, "superuser": u.is_superuser, "groups": sorted(g.name for g in u.groups.all()), "usable_password": u.has_usable_password(), "email": u.email}))
"""
pytestmark = needs_chromium


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """The OpenID provider, on loopback in a process of its own; alice's claims registered."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_for_port(port, process, timeout=30)
        url = f"http://127.0.0.1:{port}"
        claims = {
            "email": "alice@example.com",
            "preferred_username": "alice",
            "groups": ["sre", "not-a-django-group", "org:acme"],
        }
        httpx.put(f"{url}/users/alice", json=claims, timeout=10).raise_for_status()
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def sso_env(issuer: str, password_login: bool) -> dict[str, str]:
    return {
        "SWITCHBOARD_OIDC_ISSUER": issuer,
        "SWITCHBOARD_OIDC_CLIENT_ID": "switchboard-admin",
        "SWITCHBOARD_OIDC_CLIENT_SECRET": "switchboard-secret",
        "SWITCHBOARD_PASSWORD_LOGIN": "true" if password_login else "false",
    }


def user_state(gw) -> dict:
    import json

    out = gw.manage("shell", "-c", READ_USER).stdout
    return json.loads(next(line[5:] for line in out.splitlines() if line.startswith("USER ")))


def test_a_browser_signs_in_through_the_provider_and_lands_in_the_admin_with_the_mapped_group(
    make_gateway, mock_upstream, provider
):
    from playwright.sync_api import sync_playwright

    gw = make_gateway(CONFIG.format(mock=mock_upstream.url), env=sso_env(provider, password_login=True))
    gw.manage("shell", "-c", GROUPS)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT).new_page()
        page.set_default_timeout(WAIT_MS * 2)
        page.goto(f"{gw.url}/admin/")
        assert page.locator("#id_password").count() == 1  # password login still on
        page.click("#sso-button")
        page.wait_for_url(f"{provider}/oauth2/authorize*")
        page.fill("input[name=sub]", "alice")
        page.click("button[type=submit]:not([name=action])")
        page.wait_for_url(f"{gw.url}/admin/")
        assert "alice" in page.inner_text("#user-tools").lower()
        assert page.locator("a[href='/admin/policies/org/']").count() >= 1  # the group's view permission
        assert page.locator("a[href='/admin/policies/apikey/']").count() == 0  # and nothing it does not grant
        page.goto(f"{gw.url}/admin/policies/org/")
        assert "acme" in page.inner_text("#result_list") and "beta" not in page.inner_text("#result_list")
        # Log out: through the provider's end_session_endpoint (from discovery), and back to the login page.
        page.click("#logout-form button")
        page.wait_for_url(f"{provider}/oauth2/end_session*")
        query = parse_qs(urlsplit(page.url).query)
        assert query["post_logout_redirect_uri"] == [f"{gw.url}/admin/login/"]
        hint = jwt.decode(query["id_token_hint"][0], options={"verify_signature": False})
        assert hint["sub"] == "alice" and hint["iss"].rstrip("/") == provider
        page.click("button[type=submit]")
        page.wait_for_url(f"{gw.url}/admin/login/*")
        page.goto(f"{gw.url}/admin/")
        assert page.url.startswith(f"{gw.url}/admin/login/")  # the Switchboard session is over too
        browser.close()
    state = user_state(gw)
    assert state == {
        "orgs": ["acme"],  # the provider's org:acme: an operator of acme alone
        "staff": True,
        "superuser": False,
        "groups": ["sre"],  # the provider's groups that name a Django group
        "usable_password": False,
        "email": "alice@example.com",
    }


def test_with_password_login_off_the_form_is_gone_and_a_password_is_refused(make_gateway, mock_upstream, provider):
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url), env=sso_env(provider, password_login=False))
    gw.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_superuser('root', 'r@example.com', 'right-horse-battery')",
    )
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        page = client.get("/admin/login/")
        assert page.status_code == 200
        assert 'id="sso-button"' in page.text and 'name="password"' not in page.text
        refused = client.post("/admin/login/", data={"username": "root", "password": "right-horse-battery"})
        assert refused.status_code in (200, 403) and "sessionid" not in client.cookies
    # No backend takes a password any more, whatever form or client sends it.
    out = gw.manage(
        "shell",
        "-c",
        "from django.contrib.auth import authenticate; "
        "print('AUTH', authenticate(username='root', password='right-horse-battery'))",
    ).stdout
    assert "AUTH None" in out
