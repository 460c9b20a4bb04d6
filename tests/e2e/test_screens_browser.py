"""The operator screens in a real browser (Chromium through Playwright), against a real gateway and mock upstream:
the landing page, the structured limits and budget fields of the organisation page, tables that fit 1280 px, and
the playground sending a streamed chat through the gateway's own /v1 API (docs/dashboard.md)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium, shell_state, with_superuser

USER, PASSWORD = "screens", "screens-e2e-Secret-pw-1"

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: pg-chat
    provider: mock
    upstream_model: up-pg-chat
    capabilities: [chat, streaming]
    input_price_per_mtok: 1000
    output_price_per_mtok: 2000
orgs:
  - name: acme
    agents:
      - name: bot
        default_model: pg-chat
        limits: {{rpm: 600, tpm: 1000000}}
        budget: {{usd: 50, period: month}}
      - name: a-rather-long-agent-name-for-the-inline
        limits: {{rpm: 1200}}
"""

READ_SCRIPT = """
import json
from policies.models import Agent, Org
org = Org.objects.get(name="acme")
print("STATE", json.dumps({"org": [org.limits, org.budget], "bot": [Agent.objects.get(name="bot").limits, Agent.objects.get(name="bot").budget]}))
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return with_superuser(make_gateway(CONFIG.format(mock=mock_upstream.url)), USER, PASSWORD)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC")
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


def login(page, gw, next_path: str) -> None:
    page.goto(f"{gw.url}/admin/login/?next={next_path}")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_path}")


def stored(gw) -> dict:
    return shell_state(gw, READ_SCRIPT)


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: it fits, no horizontal scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_the_landing_page_leads_a_new_user_to_admin_dashboard_docs_and_the_api(page, gw):
    page.goto(f"{gw.url}/")
    assert page.title() == "Switchboard"
    assert f"curl -s {gw.url}/v1/models" in page.text_content("#models-example")
    assert overflow(page) <= 0
    page.click("#openapi-link")
    assert json.loads(page.text_content("body"))["openapi"].startswith("3.1")
    page.go_back()
    page.click("#doc-links a[href='/docs/api.md']")
    assert page.text_content("article.doc h1") == "HTTP API"  # rendered, no longer the Markdown text
    page.go_back()
    page.click("#operator-links >> #admin-link")
    assert "/admin/login/" in page.url and "Switchboard administration" in page.text_content("#site-name")


def test_limits_and_budget_fields_show_the_validation_error_then_save(page, gw):
    login(page, gw, "/admin/policies/org/")
    page.click("text=acme")
    assert overflow(page) <= 0, "the organisation page with its agents inline is wider than 1280 px"
    bot = "agents-1"  # agents are listed by name: a-rather-long-…, bot
    assert page.input_value(f"[name={bot}-limits_rpm]") == "600"
    assert page.input_value(f"[name={bot}-budget_period]") == "month"

    page.fill("[name=limits_rpm]", "0")
    page.fill("[name=budget_usd]", "25")
    page.select_option("[name=budget_period]", "day")
    page.click("input[name=_continue]")
    error = page.text_content(".field-limits .errorlist")
    assert "rpm of org 'acme' must be a positive whole number of requests per minute, got 0" in error
    assert page.input_value("[name=limits_rpm]") == "0"  # what was typed is kept for correction
    assert stored(gw)["org"] == [None, None]

    page.fill("[name=limits_rpm]", "120")
    page.fill(f"[name={bot}-budget_usd]", "7.5")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    assert stored(gw) == {
        "org": [{"rpm": 120}, {"usd": 25, "period": "day"}],
        "bot": [{"rpm": 600, "tpm": 1000000}, {"usd": 7.5, "period": "month"}],
    }


def test_the_api_key_list_fits_1280_px_with_its_requests_and_spend(page, gw):
    gw.manage(
        "shell",
        "-c",
        "from policies.keys import create_api_key; from policies.models import Agent;"
        " [create_api_key(agent=a, label='production backend, eu-west-1 (rotated quarterly)',"
        " note='held by the platform team') for a in Agent.objects.all()]",
    )
    login(page, gw, "/admin/policies/apikey/")
    assert overflow(page) <= 0, "the API key list is wider than 1280 px"
    # the list scrolls inside its own box when too wide: every column must be inside that box
    box = page.evaluate(
        "(() => { const r = document.querySelector('.results').getBoundingClientRect(); return r.right; })()"
    )
    for column in ("requests", "spend"):
        cell = page.locator(f"td.field-{column}").first.bounding_box()
        assert cell is not None and cell["x"] + cell["width"] <= min(box, VIEWPORT["width"]), f"{column} is cut off"
    assert re.fullmatch(r"\$\d+\.\d{4}", page.locator("td.field-spend").first.text_content().strip())
    assert page.locator("th.column-spend").text_content().strip() == "Spend (USD)"


def test_the_playground_streams_a_chat_through_the_gateway_and_shows_cost_headers_and_trail(page, gw):
    login(page, gw, "/dashboard/playground/")
    assert overflow(page) <= 0
    page.select_option("#pg-agent", label="acme / bot")
    page.click("#pg-connect")
    page.wait_for_selector("#pg-model:not([disabled])")
    assert page.input_value("#pg-model") == "pg-chat"
    page.fill("#pg-message", "Hello from the browser test")
    assert page.is_checked("#pg-stream")
    page.click("#pg-send")
    page.wait_for_selector("#pg-record[data-loaded=true]", timeout=15000)
    assert page.text_content("#pg-answer").startswith("tok0 tok1 tok2")
    headers = {
        row.get_attribute("data-header"): row.locator("td").nth(1).text_content()
        for row in page.locator("#pg-headers tbody tr").all()
    }
    assert headers["x-switchboard-model-used"] == "pg-chat" and headers["x-switchboard-attempts"] == "1"
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-request-id"].startswith("playground-")
    assert headers["x-ratelimit-limit-requests"] in ("600", "120")  # the agent's, or the org's once the form test ran
    # 12 prompt + 7 completion tokens (the mock's usage) at $1000 and $2000 per million tokens
    assert page.text_content("#pg-cost") == "$0.02600000 USD"
    assert page.text_content("#pg-tokens") == "12 prompt + 7 completion"
    trail = page.locator("#pg-trail li")
    assert trail.count() == 1 and trail.first.get_attribute("data-served") == "true"
    assert "pg-chat (mock)" in trail.first.text_content()


@pytest.mark.parametrize(
    "path", ["/dashboard/", "/dashboard/analytics/", "/dashboard/requests/", "/dashboard/usage/", "/dashboard/limits/"]
)
def test_dashboard_pages_fit_1280_px_and_show_amounts_in_usd(page, gw, path):
    for _ in range(2):  # a record to list (and to price) on every page
        httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": "fit-a-rather-long-client-request-id"},
            json={"model": "pg-chat", "messages": [{"role": "user", "content": "hi"}]},
        ).raise_for_status()
    login(page, gw, path)
    assert overflow(page) <= 0, f"{path} is wider than 1280 px"
    if path != "/dashboard/":
        assert "(USD)" in page.text_content("main")
