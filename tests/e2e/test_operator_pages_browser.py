"""The operators' usage pages in a real headless Chromium, against a real server and the mock upstream.

Real requests through the gateway leave real usage rows (written by the server's usage
writer); the browser then proves:
- the analytics page draws uPlot charts whose points are those requests, and a filter
  changes them; a staff user without routing.view_usagerecord gets 403;
- the request log finds a request by its id and shows its chain trail (the failed
  link, why it was left, the link that served) and, the org having opted in, its bodies;
- the live dashboard's sparklines grow as traffic arrives, without a reload;
- the admin key list shows the key's last use, requests and spend.

With SWITCHBOARD_DOCS_SCREENSHOTS=1 it refreshes docs/analytics.png, docs/request-log.png
and docs/request-trail.png. Chromium is found as in test_dashboard_browser.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, needs_chromium
from tests.e2e.harness import ROOT

ADMIN_USER = "analyst"
ADMIN_PASSWORD = "ops-e2e-Secret-pw-1"
WATCHER = "watcher"
VIEWPORT = {"width": 1360, "height": 900}
WAIT_MS = 8000
DOCS = ROOT / "docs" if os.environ.get("SWITCHBOARD_DOCS_SCREENSHOTS") else None
TRAIL_REQUEST_ID = "req-trail-e2e-0001"

CONFIG = """
resilience:
  max_retries: 0
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 50
providers:
  - name: mock-openai
    dialect: openai
    base_url: {mock}/v1
    api_key_env: SWITCHBOARD_UPSTREAM_OPS
  - name: mock-backup
    dialect: openai
    base_url: {mock}/v1
    api_key_env: SWITCHBOARD_UPSTREAM_OPS
models:
  - id: ops-main
    provider: mock-openai
    upstream_model: up-ops-main
    capabilities: [chat, streaming]
    fallbacks: [ops-backup]
    input_price_per_mtok: 2.0
    output_price_per_mtok: 8.0
  - id: ops-backup
    provider: mock-backup
    upstream_model: up-ops-backup
    capabilities: [chat, streaming]
    input_price_per_mtok: 1.0
    output_price_per_mtok: 4.0
  - id: ops-solo
    provider: mock-openai
    upstream_model: up-ops-solo
    capabilities: [chat]
  - id: ops-spark
    provider: mock-openai
    upstream_model: up-ops-spark
    capabilities: [chat]
orgs:
  - name: acme
    log_bodies: true
    agents:
      - name: bot
"""

# A superuser for the browser, and a staff user without the usage permission whose
# session key is printed for the browser's cookie jar.
USERS_SCRIPT = f"""
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
User = get_user_model()
User.objects.create_superuser({ADMIN_USER!r}, "ops@example.com", {ADMIN_PASSWORD!r})
watcher = User.objects.create_user({WATCHER!r}, "w@example.com", "watcher-pw-123", is_staff=True)
session = SessionStore()
session[SESSION_KEY] = str(watcher.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = watcher.get_session_auth_hash()
session.create()
print("SESSION", session.session_key)
"""

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_UPSTREAM_OPS": "sk-upstream-ops"})


@pytest.fixture(scope="module")
def watcher_session(gw) -> str:
    out = gw.manage("shell", "-c", USERS_SCRIPT).stdout
    return next(line.split()[1] for line in out.splitlines() if line.startswith("SESSION "))


@pytest.fixture(scope="module")
def http(gw) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as client:
        yield client


@pytest.fixture(scope="module")
def traffic(gw, http, mock_upstream, watcher_session) -> dict[str, int]:
    """Real requests: four served by ops-main, one fallback to ops-backup (known request id), one 5xx."""
    for _ in range(4):
        assert chat(http, "ops-main").status_code == 200
    mock_upstream.script("up-ops-main", [{"status": 503}])
    response = chat(http, "ops-main", request_id=TRAIL_REQUEST_ID)
    assert response.status_code == 200 and response.headers["x-switchboard-model-used"] == "ops-backup"
    mock_upstream.script("up-ops-solo", [], then={"status": 500})
    assert chat(http, "ops-solo").status_code >= 500
    return {"requests": 6, "served_by_main": 4, "served_by_backup": 1}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, gw):
    ctx = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC")
    ctx.set_default_timeout(WAIT_MS)
    page = ctx.new_page()
    page.goto(f"{gw.url}/admin/login/?next=/admin/")
    page.fill("#id_username", ADMIN_USER)
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{gw.url}/admin/")
    yield page
    ctx.close()


def chat(http: httpx.Client, model: str, request_id: str | None = None) -> httpx.Response:
    headers = {"X-Request-Id": request_id} if request_id else {}
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    return http.post("/v1/chat/completions", json=body, headers=headers)


def open_until(page, url: str, ready: str, timeout_s: float = 20.0) -> None:
    """Load `url` until the JS condition `ready` holds: the server writes usage rows within a second or so."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto(url)
        if page.evaluate(ready):
            return
        assert time.monotonic() < deadline, f"{url}: condition not met within {timeout_s} s: {ready}"
        page.wait_for_timeout(300)


def chart_sum(page, chart: str, series: int) -> float:
    return page.evaluate(
        "([c, s]) => window.switchboardCharts[c].data[s].reduce((a, v) => a + (v || 0), 0)", [chart, series]
    )


def screenshot(page, name: str) -> None:
    shot = page.screenshot(path=str(DOCS / name) if DOCS else None, full_page=True)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000


def test_analytics_draws_the_requests_and_filters_change_the_charts(gw, traffic, page):
    # (Other tests of this module add traffic of their own, to ops-spark only, and the harness
    # lists models with the key; the counts below are of this fixture's requests.)
    url = f"{gw.url}/dashboard/analytics/?range=hour"
    open_until(page, url, "(document.getElementById('t-errors').textContent | 0) >= 1")
    for chart in ("traffic", "latency", "cost", "tokens"):
        assert page.locator(f"#chart-{chart} canvas").count() == 1  # drawn by uPlot
    total = int(page.text_content("#t-requests"))
    assert total >= traffic["requests"]
    assert chart_sum(page, "traffic", 1) == total  # requests per minute add up to the total
    assert chart_sum(page, "traffic", 2) == 1  # the 5xx
    assert chart_sum(page, "traffic", 4) == 1  # the fallback
    assert int(page.get_attribute("#chart-traffic", "data-points")) >= 1
    assert chart_sum(page, "cost", 1) > 0 and chart_sum(page, "tokens", 1) > 0
    assert page.evaluate("window.switchboardCharts.latency.data[1].some(v => v > 0)")  # a p50 point
    assert page.locator('#top-models tr[data-model="ops-main"]').count() == 1
    assert page.locator(f'#top-keys tr[data-key="{gw.api_key[:10]}"]').count() == 1
    screenshot(page, "analytics.png")

    # Filter on the model that served the fallback: the charts show that one request only.
    page.select_option("#f-model", "ops-backup")
    page.wait_for_url(lambda url: "model=ops-backup" in url)
    page.wait_for_function("window.switchboardCharts && window.switchboardCharts.traffic")
    assert chart_sum(page, "traffic", 1) == traffic["served_by_backup"]
    assert chart_sum(page, "traffic", 4) == 1
    assert page.text_content("#t-requests").strip() == "1"
    page.select_option("#f-model", "ops-main")
    page.wait_for_url(lambda url: "model=ops-main" in url)
    page.wait_for_function("window.switchboardCharts && window.switchboardCharts.traffic")
    assert chart_sum(page, "traffic", 1) == traffic["served_by_main"]
    assert chart_sum(page, "traffic", 4) == 0 and chart_sum(page, "traffic", 2) == 0
    # and the CSV export of that view says the same
    csv_href = page.get_attribute("#csv-link", "href")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    csv_text = httpx.get(f"{gw.url}/dashboard/analytics/{csv_href}", cookies=cookies).text
    assert sum(int(line.split(",")[1]) for line in csv_text.splitlines()[1:]) == traffic["served_by_main"]


def painted(page, chart: str, rgb: tuple[int, int, int]) -> int:
    """Pixels of the chart's canvas in a series' colour (a line or a dot drawn in it)."""
    return page.evaluate(
        """([chart, rgb]) => {
            const c = document.querySelector(`#chart-${chart} canvas`);
            const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (d[i + 3] > 200 && Math.abs(d[i] - rgb[0]) + Math.abs(d[i + 1] - rgb[1]) + Math.abs(d[i + 2] - rgb[2]) < 60) n++;
            }
            return n;
        }""",
        [chart, list(rgb)],
    )


def test_a_week_whose_traffic_fell_in_one_hour_still_draws_its_latency(gw, traffic, page):
    """168 hourly buckets, one with requests: one p50 value, which no line joins; a dot shows it."""
    open_until(
        page, f"{gw.url}/dashboard/analytics/?range=week", "(document.getElementById('t-errors').textContent | 0) >= 1"
    )
    values = page.evaluate("window.switchboardCharts.latency.data[1].filter(v => v != null)")
    assert values and values[0] > 0  # one hour (two if the run crossed an hour)
    assert painted(page, "latency", (0x1A, 0x7F, 0x37)) > 0  # the p50 colour


def test_staff_without_the_usage_permission_gets_403(gw, browser, watcher_session):
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        ctx.add_cookies([{"name": "sessionid", "value": watcher_session, "url": gw.url}])
        page = ctx.new_page()
        for path in ("/dashboard/analytics/", "/dashboard/requests/"):
            response = page.goto(f"{gw.url}{path}")
            assert response is not None and response.status == 403
            assert "routing.view_usagerecord" in page.content()
    finally:
        ctx.close()


def test_request_log_finds_a_request_by_id_and_shows_its_trail(gw, traffic, page):
    open_until(
        page,
        f"{gw.url}/dashboard/requests/",
        "document.querySelectorAll('#records tbody tr[data-request-id]').length >= 6",
    )
    page.fill("#f-request-id", TRAIL_REQUEST_ID)
    page.click("#f-apply")
    page.wait_for_url(lambda url: f"request_id={TRAIL_REQUEST_ID}" in url)
    rows = page.locator("#records tbody tr[data-request-id]")
    assert rows.count() == 1 and rows.first.get_attribute("data-request-id") == TRAIL_REQUEST_ID
    assert "ops-main: upstream_5xx" in rows.first.text_content()
    # status filter: only the failed request
    page.goto(f"{gw.url}/dashboard/requests/?status=5xx")
    assert page.locator("#records tbody tr[data-request-id]").count() == 1
    assert page.get_attribute("#records tbody tr[data-request-id]", "data-status").startswith("5")
    page.goto(f"{gw.url}/dashboard/requests/")
    screenshot(page, "request-log.png")

    page.goto(f"{gw.url}/dashboard/requests/?request_id={TRAIL_REQUEST_ID}")
    page.click("#records a.record-link")
    page.wait_for_selector("#trail")
    assert page.text_content("#request-id") == TRAIL_REQUEST_ID
    first = page.locator("#trail li").nth(0)
    second = page.locator("#trail li").nth(1)
    assert first.get_attribute("data-model") == "ops-main" and first.get_attribute("data-outcome") == "upstream_5xx"
    assert first.get_attribute("data-served") == "false" and "on mock-openai" in first.text_content()
    assert second.get_attribute("data-model") == "ops-backup" and second.get_attribute("data-served") == "true"
    assert "on mock-backup" in second.text_content()
    assert page.text_content("#fallback-reason").strip() == "upstream_5xx"
    # acme opted into bodies: the superuser sees what was sent and answered, never the key
    assert "hello there" in page.text_content("#request-body")
    assert '"object":"chat.completion"' in page.text_content("#response-body").replace(" ", "")
    assert gw.api_key not in page.content()
    screenshot(page, "request-trail.png")


def test_sparklines_grow_live_as_traffic_arrives(gw, traffic, http, page):
    page.goto(f"{gw.url}/dashboard/")
    page.wait_for_selector('#conn-status[data-status="open"]')
    cell = 'tr[data-link="mock-openai/ops-spark"] [data-role="spark"]'
    page.wait_for_selector(cell)
    before = int(page.get_attribute(cell, "data-requests") or 0)
    assert page.locator(f'{cell} svg[data-spark="traffic"] polyline').count() == 2
    page.evaluate("() => { window.__sameDocument = true; }")
    for _ in range(3):
        assert chat(http, "ops-spark").status_code == 200
    page.wait_for_function(f"(document.querySelector('{cell}').dataset.requests | 0) >= {before + 3}")
    assert page.locator(f'{cell} svg[data-spark="p50"] polyline').count() == 1
    assert page.evaluate("() => window.__sameDocument === true")  # pushed over the socket, no reload
    assert "p50" in page.text_content(f'{cell} [data-role="spark-label"]')
    # the fallback counted for the link that served it
    backup = 'tr[data-link="mock-backup/ops-backup"] [data-role="spark"]'
    assert int(page.get_attribute(backup, "data-requests")) >= traffic["served_by_backup"]


def test_key_list_shows_last_used_requests_and_spend(gw, traffic, page):
    prefix = gw.api_key[:10]
    url = f"{gw.url}/admin/policies/apikey/"
    # the key-created request of the harness and the traffic all used this key
    open_until(
        page,
        url,
        f"""(() => {{
            const row = Array.from(document.querySelectorAll('#result_list tbody tr'))
                .find(tr => tr.textContent.includes('{prefix}'));
            return !!row && (row.querySelector('td.field-requests').textContent | 0) >= {traffic["requests"]};
        }})()""",
    )
    row = page.locator("#result_list tbody tr", has_text=prefix)
    assert row.locator("td.field-last_used").text_content().strip() != "never"
    spend = row.locator("td.field-spend").text_content()
    assert spend.startswith("$") and float(spend[1:]) > 0
