"""Configuration history in a real browser against a real server: an edit in the admin is a new
version by the signed-in user; from the history, "Roll back to this version" shows what would
change, asks, and the confirmed rollback is served and recorded as a new version.

With SWITCHBOARD_HISTORY_SCREENSHOT=docs/config-history.png it refreshes the docs' picture of
the confirmation page. Needs a Chromium, as tests/e2e/test_dashboard_browser.py does.
"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium, with_superuser
from tests.e2e.harness import ROOT, SLACK_S

USER, PASSWORD = "historian", "history-e2e-Secret-pw-1"
SCREENSHOT = os.environ.get("SWITCHBOARD_HISTORY_SCREENSHOT", "")

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: hist-chat
    provider: mock
    upstream_model: up-hist-v1
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return with_superuser(make_gateway(CONFIG.format(mock=mock_upstream.url)), USER, PASSWORD)


def upstream_calls(mock_upstream, gw, upstream: str) -> int:
    """Send one chat to hist-chat; how many calls the mock has seen for `upstream`."""
    response = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": "hist-chat", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return mock_upstream.count(upstream)


def wait_until_routed_to(mock_upstream, gw, upstream: str) -> None:
    """Until a request to hist-chat reaches `upstream` at the mock (bounded: reload promise + SLACK_S)."""
    start = time.monotonic()
    before = mock_upstream.count(upstream)
    while upstream_calls(mock_upstream, gw, upstream) == before:
        assert time.monotonic() - start < 1.0 + SLACK_S, f"requests never reached {upstream}"
        time.sleep(0.05)


def test_edit_then_roll_back_through_the_admin(gw, mock_upstream):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC").new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{gw.url}/admin/login/?next=/admin/providers/model/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.click("text=hist-chat")
        page.fill("#id_upstream_model", "up-hist-v2")
        page.click("input[name=_save]")
        page.wait_for_selector(".messagelist .success")
        wait_until_routed_to(mock_upstream, gw, "up-hist-v2")

        page.goto(f"{gw.url}/admin/routing/configrevision/")
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 2
        assert USER in rows.nth(0).inner_text() and "admin" in rows.nth(0).inner_text()
        rows.nth(1).locator("a").first.click()  # version 1
        page.click("#rollback-link")
        changed = page.locator('#history-diff tr[data-path="models[hist-chat].upstream_model"]')
        assert "up-hist-v2" in changed.inner_text() and "up-hist-v1" in changed.inner_text()
        shot = page.screenshot(path=str(ROOT / SCREENSHOT) if SCREENSHOT else None, full_page=True)
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
        page.click("#rollback-confirm")
        page.wait_for_selector(".messagelist .success")
        assert "recorded as version 3" in page.inner_text(".messagelist")
        browser.close()

    wait_until_routed_to(mock_upstream, gw, "up-hist-v1")
    rows = json.loads(gw.manage("config_history", "--json").stdout)
    assert [(r["version"], r["author"], r["source"]) for r in rows[:2]] == [
        (3, USER, "rollback"),
        (2, USER, "admin"),
    ]
