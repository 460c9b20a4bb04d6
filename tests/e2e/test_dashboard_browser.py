"""The live dashboard in a real headless Chromium against a real server (daphne or uvicorn) and the mock upstream.

Proves, through the browser only (no page reload):
- the admin index links to the dashboard, and only staff get to see it;
- a breaker opening in the gateway reaches the open page over the websocket (the
  row turns red), and the row's Reset button closes the breaker so traffic reaches
  the upstream again.

It also takes a screenshot while one link is open; with
SWITCHBOARD_DASHBOARD_SCREENSHOT=docs/dashboard.png it refreshes the README's picture.
Needs a Chromium: Debian's at /usr/lib/chromium/chromium (CI installs it), or any
`chromium` / `chromium-browser` / `google-chrome` on PATH; Playwright drives it and
never downloads a browser.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium
from tests.e2e.harness import ROOT

SCREENSHOT = os.environ.get("SWITCHBOARD_DASHBOARD_SCREENSHOT", "")
ADMIN_USER = "operator"
ADMIN_PASSWORD = "dash-e2e-Secret-pw-1"
VIEWER_USER = "viewer"
OPEN_RED = "rgb(207, 34, 46)"  # --open in templates/dashboard/dashboard.css
CLOSED_GREEN = "rgb(26, 127, 55)"  # --closed

PRIMARY_PROVIDER = "mock-openai"
PRIMARY_LINK = f"{PRIMARY_PROVIDER}/dash-primary"

CONFIG = """
resilience:
  max_retries: 0
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 2
  breaker_cooldown_s: 300
providers:
  - name: mock-openai
    dialect: openai
    base_url: {mock}/v1
    api_key_env: SWITCHBOARD_UPSTREAM_DASH
    health_probe: true
  - name: mock-anthropic
    dialect: anthropic
    base_url: {mock}/anthropic/v1
    api_key_env: SWITCHBOARD_UPSTREAM_DASH
    health_probe: true
models:
  - id: dash-primary
    provider: mock-openai
    upstream_model: up-dash-primary
    capabilities: [chat, streaming]
  - id: dash-chat
    provider: mock-openai
    upstream_model: up-dash-chat
    capabilities: [chat, streaming]
  - id: dash-mini
    provider: mock-openai
    upstream_model: up-dash-mini
    capabilities: [chat, streaming]
    fallbacks: [dash-claude]
  - id: dash-claude
    provider: mock-anthropic
    upstream_model: up-dash-claude
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""

# One `manage.py shell` run: a staff superuser for the browser, a signed-in non-staff
# user (the admin login refuses non-staff, so its session is made here) whose
# session key is printed for the browser's cookie jar.
USERS_SCRIPT = f"""
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
User = get_user_model()
User.objects.create_superuser({ADMIN_USER!r}, "ops@example.com", {ADMIN_PASSWORD!r})
viewer = User.objects.create_user({VIEWER_USER!r}, "viewer@example.com", "viewer-pw-not-staff-1")
session = SessionStore()
session[SESSION_KEY] = str(viewer.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = viewer.get_session_auth_hash()
session.create()
print("SESSION", session.session_key)
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_UPSTREAM_DASH": "sk-upstream-dash"})


@pytest.fixture(scope="module")
def viewer_session(gw) -> str:
    out = gw.manage("shell", "-c", USERS_SCRIPT).stdout
    return next(line.split()[1] for line in out.splitlines() if line.startswith("SESSION "))


@pytest.fixture(scope="module")
def http(gw) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC")
    ctx.set_default_timeout(WAIT_MS)
    yield ctx
    ctx.close()


def chat(http: httpx.Client, model: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return http.post("/v1/chat/completions", json=body, headers=headers)


def sign_in(page, gw) -> None:
    """Through the real admin login form, landing on the admin index."""
    page.goto(f"{gw.url}/admin/login/?next=/admin/")
    page.fill("#id_username", ADMIN_USER)
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{gw.url}/admin/")


def socket_opens(page, gw) -> bool:
    """Whether this browser context gets dashboard data over the socket (same origin as the page).

    A refused socket is closed at once with code 4403 before any message."""
    outcome = page.evaluate(
        """url => new Promise(resolve => {
            const ws = new WebSocket(url);
            ws.onmessage = () => { ws.close(); resolve("data"); };
            ws.onclose = ev => resolve(ev.code);
        })""",
        f"ws://127.0.0.1:{gw.port}/ws/dashboard/",
    )
    assert outcome in ("data", 4403), outcome
    return outcome == "data"


def css(page, selector: str, prop: str) -> str:
    return page.eval_on_selector(selector, f"e => getComputedStyle(e).getPropertyValue({json.dumps(prop)})")


def test_only_staff_see_the_dashboard_and_the_admin_links_to_it(gw, viewer_session, browser):
    # Anonymous: the page sends the browser to the admin login, and the socket is refused.
    anon = browser.new_context(viewport=VIEWPORT)
    try:
        page = anon.new_page()
        page.goto(f"{gw.url}/dashboard/")
        assert page.url == f"{gw.url}/admin/login/?next=/dashboard/"
        assert page.locator("#id_username").is_visible()
        assert page.locator("#link-rows").count() == 0
        assert socket_opens(page, gw) is False
    finally:
        anon.close()

    # Signed in without staff status: 403, no dashboard, no socket.
    plain = browser.new_context(viewport=VIEWPORT)
    try:
        plain.add_cookies([{"name": "sessionid", "value": viewer_session, "url": gw.url}])
        page = plain.new_page()
        response = page.goto(f"{gw.url}/dashboard/")
        assert response is not None and response.status == 403
        assert page.url == f"{gw.url}/dashboard/"
        assert "staff" in page.content()
        assert page.locator("#link-rows").count() == 0
        assert socket_opens(page, gw) is False
    finally:
        plain.close()

    # Staff: the admin index links to the dashboard, and following it connects live.
    staff = browser.new_context(viewport=VIEWPORT)
    try:
        staff.set_default_timeout(WAIT_MS)
        page = staff.new_page()
        sign_in(page, gw)
        link = page.locator("#dashboard-link")
        assert link.get_attribute("href") == "/dashboard/"
        link.click()
        page.wait_for_url(f"{gw.url}/dashboard/")
        page.wait_for_selector('#conn-status[data-status="open"]')
        assert page.get_attribute("body", "data-user") == ADMIN_USER
        assert socket_opens(page, gw) is True
    finally:
        staff.close()


def test_breaker_opening_is_pushed_live_and_reset_from_the_page_closes_it(
    gw, viewer_session, http, mock_upstream, context
):
    beta = gw.create_key("beta", "bot")  # a second org's key: one org's failures open only its own view
    page = context.new_page()
    sign_in(page, gw)
    page.goto(f"{gw.url}/dashboard/")
    page.wait_for_selector('#conn-status[data-status="open"]')
    row = f'tr[data-link="{PRIMARY_LINK}"]'
    page.wait_for_selector(f'{row}[data-state="closed"]')
    assert page.locator("#link-rows tr").count() == 4
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if the page ever reloads

    # Some healthy traffic, and one fallback (dash-mini's upstream fails once, dash-claude answers;
    # the dashboard counts a request, and its fallback, for the link that served it).
    for _ in range(6):
        assert chat(http, "dash-chat").status_code == 200
    mock_upstream.script("up-dash-mini", [{"status": 503}])
    for _ in range(3):
        response = chat(http, "dash-mini")
        assert response.status_code == 200
    assert mock_upstream.count("up-dash-claude") == 1
    for _ in range(2):
        assert chat(http, "dash-claude").status_code == 200
    for _ in range(2):
        assert chat(http, "dash-primary").status_code == 200

    # The primary starts failing: two 5xx, seen by two orgs, open its breaker for everyone
    # (threshold 2, no retries, no fallbacks; docs/resilience.md#org-views).
    mock_upstream.script("up-dash-primary", [], then={"status": 500})
    before = mock_upstream.count("up-dash-primary")
    for key in (gw.api_key, beta):
        assert chat(http, "dash-primary", key).status_code >= 500
    assert mock_upstream.count("up-dash-primary") == before + 2

    # ... and the page, never reloaded, shows it open and red.
    page.wait_for_selector(f'{row}[data-state="open"]', timeout=WAIT_MS)
    badge = f'{row} [data-role="state"]'
    assert page.text_content(badge) == "open"
    assert css(page, badge, "background-color") == OPEN_RED
    assert css(page, f"{row} td:first-child", "border-left-color") == OPEN_RED
    page.wait_for_selector(f'#feed li[data-kind="breaker"][data-link="{PRIMARY_LINK}"]')
    assert "closed → open" in page.text_content(f'#feed li[data-kind="breaker"][data-link="{PRIMARY_LINK}"]')
    # The other links stay closed (green).
    for other in ("mock-openai/dash-chat", "mock-openai/dash-mini", "mock-anthropic/dash-claude"):
        assert page.get_attribute(f'tr[data-link="{other}"]', "data-state") == "closed"
        assert css(page, f'tr[data-link="{other}"] [data-role="state"]', "background-color") == CLOSED_GREEN

    # While open, the gateway answers without calling the upstream.
    open_count = mock_upstream.count("up-dash-primary")
    assert chat(http, "dash-primary").status_code >= 500
    assert mock_upstream.count("up-dash-primary") == open_count

    # Let the periodic state refresh bring counters and probe results, then take the README screenshot.
    page.wait_for_function(
        """() => {
            const rps = document.querySelector('tr[data-link="mock-openai/dash-chat"] [data-role="rps"]');
            const err = document.querySelector('tr[data-link="mock-openai/dash-primary"] [data-role="error-rate"]');
            const fb = document.querySelector('tr[data-link="mock-anthropic/dash-claude"] [data-role="fallback-rate"]');
            const up = document.querySelectorAll('#provider-rows tr[data-status="up"]').length;
            return rps && rps.textContent !== "0.00" && err && err.textContent !== "–"
                && fb && fb.textContent !== "–" && fb.textContent !== "0 %" && up === 2
                && document.querySelector('#feed li[data-kind="fallback"]');
        }""",
        timeout=WAIT_MS,
    )
    assert page.text_content(f'{row} [data-role="failures"]') == "2"
    assert page.text_content(f'{row} [data-role="cooldown"]') != "–"
    assert page.get_attribute(row, "data-state") == "open"
    shot = page.screenshot(path=str(ROOT / SCREENSHOT) if SCREENSHOT else None, full_page=True)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(shot) > 10_000

    # Reset from the page: the breaker closes, the page says so, traffic reaches the upstream again.
    mock_upstream.script("up-dash-primary", [])  # healthy again
    page.click(f'{row} [data-action="reset"]')
    page.wait_for_selector(f'{row}[data-state="closed"]', timeout=WAIT_MS)
    assert css(page, badge, "background-color") == CLOSED_GREEN
    page.wait_for_selector('#flash[data-ok="true"]')
    assert page.text_content("#flash") == f"reset applied to {PRIMARY_LINK}"
    page.wait_for_selector(f'#feed li[data-kind="control"][data-link="{PRIMARY_LINK}"]')
    assert f"by {ADMIN_USER}" in page.text_content(f'#feed li[data-kind="control"][data-link="{PRIMARY_LINK}"]')
    before = mock_upstream.count("up-dash-primary")
    response = chat(http, "dash-primary")
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "dash-primary"
    assert mock_upstream.count("up-dash-primary") == before + 1
    # Still the same document and socket: nothing was reloaded.
    assert page.evaluate("() => window.__sameDocument === true")
    assert page.get_attribute("#conn-status", "data-status") == "open"
    assert page.url == f"{gw.url}/dashboard/"


def test_an_orgs_own_view_shows_on_its_link_with_its_count(gw, viewer_session, http, mock_upstream, context):
    """docs/resilience.md#org-views: beta is served by dash-chat while acme's bodies fail; the row
    stays green (the link serves everyone else) and says acme's view is open, with its count."""
    beta = gw.create_key("beta", "bot")
    page = context.new_page()
    sign_in(page, gw)
    page.goto(f"{gw.url}/dashboard/")
    page.wait_for_selector('#conn-status[data-status="open"]')
    row = 'tr[data-link="mock-openai/dash-chat"]'
    mock_upstream.script("up-dash-chat", [], then={"status": 500}, when={"field": "user", "equals": "bad-acme"})
    try:
        assert chat(http, "dash-chat", beta).status_code == 200  # beta uses the link
        body = {"model": "dash-chat", "user": "bad-acme", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(2):
            assert http.post("/v1/chat/completions", json=body).status_code == 502
        page.wait_for_function(
            """row => (document.querySelector(row + ' [data-role="forced"]') || {}).textContent
                       && document.querySelector(row + ' [data-role="forced"]').textContent.includes("acme")""",
            arg=row,
            timeout=WAIT_MS,
        )
        text = page.text_content(f'{row} [data-role="forced"]')
        assert text.startswith("open for org acme (2 failures, ") and text.endswith(" s left)"), text
        assert page.get_attribute(row, "data-state") == "closed"  # still green: beta is served
        assert chat(http, "dash-chat", beta).status_code == 200
    finally:
        mock_upstream.script("up-dash-chat", [])
        gw.manage("breaker", "reset", "mock-openai", "dash-chat")
    page.wait_for_function(
        """row => document.querySelector(row + ' [data-role="forced"]').textContent === "" """,
        arg=row,
        timeout=WAIT_MS + 5000,
    )
