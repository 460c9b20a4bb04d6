"""A key's change page in a real browser: its Models box starts empty (not `null`), a model pattern and an id
typed one per line are saved as a list, and metadata typed as key=value lines as a mapping
(docs/operations.md#admin-fields). Needs Chromium (tests/e2e/browser.py)."""

from __future__ import annotations

import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT, WAIT_MS, needs_chromium, shell_state, with_superuser

USER, PASSWORD = "keyeditor", "key-e2e-Secret-pw-1"

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: chat-a
    provider: mock
    upstream_model: up-a
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

READ_SCRIPT = """
import json
from policies.models import ApiKey
key = ApiKey.objects.get()
print("STATE", json.dumps({"pk": key.pk, "models": key.allowed_models, "metadata": key.metadata}))
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return with_superuser(make_gateway(CONFIG.format(mock=mock_upstream.url)), USER, PASSWORD)


def stored(gw) -> dict:
    return shell_state(gw, READ_SCRIPT)


def test_a_key_s_model_pattern_is_typed_and_saved(gw):
    from playwright.sync_api import sync_playwright

    pk = stored(gw)["pk"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC").new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{gw.url}/admin/login/?next=/admin/policies/apikey/{pk}/change/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        assert page.input_value("#id_allowed_models") == ""
        page.fill("#id_allowed_models", "chat-*\ngpt-4o")
        page.fill("#id_metadata", "team=search")
        page.click("input[name=_continue]")
        page.wait_for_selector(".messagelist .success")
        shown = page.input_value("#id_allowed_models")
        browser.close()

    assert shown == "chat-*\ngpt-4o"
    state = stored(gw)
    assert (state["models"], state["metadata"]) == (["chat-*", "gpt-4o"], {"team": "search"})
