"""The organisation page in a real browser: a policy's fallback chain is picked in the
model search box (select2 over /admin/policies/org/model-choices/), in order, and saved;
the agent's default model is picked the same way. Needs Debian's chromium (as the
dashboard browser test does)."""

from __future__ import annotations

import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium, shell_state, with_superuser

USER, PASSWORD = "chooser", "choose-e2e-Secret-pw-1"

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: pick-alpha
    provider: mock
    upstream_model: up-alpha
    capabilities: [chat]
  - id: pick-beta
    provider: mock
    upstream_model: up-beta
    capabilities: [chat]
  - id: pick-gamma
    provider: mock
    upstream_model: up-gamma
    capabilities: [chat]
aliases:
  quick: pick-beta
orgs:
  - name: acme
    agents:
      - name: bot
    policies:
      - pattern: "pick-*"
        action: allow
        priority: 10
"""

READ_SCRIPT = """
import json
from policies.models import Agent, OrgPolicy
print("STATE", json.dumps({"chain": OrgPolicy.objects.get().fallback_chain, "default": Agent.objects.get().default_model}))
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return with_superuser(make_gateway(CONFIG.format(mock=mock_upstream.url)), USER, PASSWORD)


def stored(gw) -> dict:
    return shell_state(gw, READ_SCRIPT)


def pick(page, select_id: str, term: str, expected_text: str) -> None:
    """Open the select2 box of <select id=select_id>, type, and choose the matching option."""
    page.click(f"#{select_id} + .select2 .select2-selection")
    page.keyboard.type(term)
    page.click(f".select2-results__option:has-text('{expected_text}')")


def test_chain_and_default_model_are_picked_in_the_browser_and_saved_in_order(gw):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC").new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{gw.url}/admin/login/?next=/admin/policies/org/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.click("text=acme")
        assert "null" not in page.content()

        page.select_option("#id_policies-0-fallback_chain_0", "chain")
        pick(page, "id_policies-0-fallback_chain_1", "gam", "pick-gamma")
        pick(page, "id_policies-0-fallback_chain_1", "alp", "pick-alpha")
        pick(page, "id_agents-0-default_model", "qui", "quick (alias of pick-beta)")
        page.click("input[name=_continue]")
        page.wait_for_selector(".messagelist .success")
        browser.close()

    assert stored(gw) == {"chain": ["pick-gamma", "pick-alpha"], "default": "quick"}


# Each link's label, measured in the page: its box is one line high and its cell wider than
# a few letters (the stock dashboard CSS once squeezed the column to 11-34 px).
LINK_BOXES = """() => [...document.querySelectorAll('#switchboard-dashboard-module th a')].map(a => {
    const box = a.getBoundingClientRect();
    return {text: a.textContent, height: box.height, width: box.width,
            line: parseFloat(getComputedStyle(a).lineHeight) || parseFloat(getComputedStyle(a).fontSize) * 1.4,
            cell: a.closest('th').getBoundingClientRect().width};
})"""


@pytest.mark.parametrize("width", [1000, 1400])
def test_the_operations_box_shows_each_link_on_one_line(gw, width):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": width, "height": 900}, locale="en-GB").new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{gw.url}/admin/login/?next=/admin/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#switchboard-dashboard-module")
        links = page.evaluate(LINK_BOXES)
        browser.close()

    assert len(links) >= 7, links
    for link in links:
        assert link["height"] < 1.5 * link["line"], link
        assert link["cell"] >= link["width"] and link["cell"] > 100, link
