"""The API reference page in a real browser (docs/dashboard.md#docs-pages): Swagger UI, served by the gateway
itself, renders the /v1 OpenAPI document into operations, and the page asks no other host for anything."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: ref-chat
    provider: mock
    upstream_model: up-ref-chat
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


def test_the_api_reference_renders_the_chat_operation_from_this_server_alone(gw):
    from playwright.sync_api import sync_playwright

    hosts: set[str] = set()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT, locale="en-GB").new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("request", lambda request: hosts.add(urlsplit(request.url).netloc))
        page.goto(f"{gw.url}/")
        page.click("#reference-link")
        chat = page.locator(".opblock-summary-path[data-path='/v1/chat/completions']")
        chat.first.wait_for()
        assert page.locator(".opblock-summary-method").first.text_content() in ("GET", "POST")
        chat.first.click()  # the operation opens: its request body and answers are described
        page.locator(".opblock-body .responses-wrapper").first.wait_for()
        assert "200" in page.locator(".opblock-body .responses-wrapper").first.text_content()
        browser.close()
    assert hosts == {urlsplit(gw.url).netloc}
