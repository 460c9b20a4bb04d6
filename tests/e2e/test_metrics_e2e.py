"""Prometheus metrics end to end (docs/metrics.md#prometheus-metrics): scrape a real server (daphne or uvicorn)'s /metrics.

Each test reads the counters before and after its own requests and asserts the
difference, on model names no other test of the module uses.
"""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import SLACK_S, manage

CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 2
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: m-ok
    provider: mock
    upstream_model: metrics-ok
    capabilities: [chat]
  - id: m-retry
    provider: mock
    upstream_model: metrics-retry
    capabilities: [chat]
  - id: m-flaky
    provider: mock
    upstream_model: metrics-flaky
    capabilities: [chat]
    fallbacks: [m-flaky-fb]
  - id: m-flaky-fb
    provider: mock
    upstream_model: metrics-flaky-fb
    capabilities: [chat]
  - id: m-brk
    provider: mock
    upstream_model: metrics-brk
    capabilities: [chat]
{extra}
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""

EXTRA_MODEL = """  - id: m-new
    provider: mock
    upstream_model: metrics-new
    capabilities: [chat]"""


class Scrape:
    """One parsed /metrics exposition; `value(name, **labels)` is 0 for a series not (yet) there."""

    def __init__(self, text: str) -> None:
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def find(self, name: str, **labels: str) -> list:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.find(name, **labels))


def scrape(gw) -> Scrape:
    response = httpx.get(f"{gw.url}/metrics", timeout=10)
    assert response.status_code == 200
    return Scrape(response.text)


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url, extra=""))


@pytest.fixture(scope="module")
def http(gw):
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as c:
        yield c


def chat(http: httpx.Client, model: str) -> httpx.Response:
    return http.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def test_requests_total_and_overhead_histogram_count_each_request(gw, http):
    before = scrape(gw)
    assert [chat(http, "m-ok").status_code for _ in range(3)] == [200] * 3
    after = scrape(gw)
    labels = {"endpoint": "chat", "model": "m-ok", "model_used": "m-ok", "status": "200"}
    assert (
        after.value("switchboard_requests_total", **labels) - before.value("switchboard_requests_total", **labels) == 3
    )
    assert after.value("switchboard_overhead_seconds_count") - before.value("switchboard_overhead_seconds_count") == 3
    assert after.find("switchboard_overhead_seconds_bucket", le="+Inf")


def test_upstream_attempts_count_retries_by_outcome(gw, http, mock_upstream):
    mock_upstream.script("metrics-retry", [{"status": 503}])  # one 503, then the default 200
    before = scrape(gw)
    response = chat(http, "m-retry")
    assert response.status_code == 200 and response.headers["x-switchboard-attempts"] == "2"
    after = scrape(gw)

    def delta(outcome: str) -> float:
        labels = {"provider": "mock", "model": "m-retry", "outcome": outcome}
        return after.value("switchboard_upstream_attempts_total", **labels) - before.value(
            "switchboard_upstream_attempts_total", **labels
        )

    assert (delta("upstream_5xx"), delta("ok")) == (1, 1)


def test_fallback_is_counted_with_its_reason(gw, http, mock_upstream):
    mock_upstream.script("metrics-flaky", [], then={"status": 503})
    before = scrape(gw)
    response = chat(http, "m-flaky")
    assert response.headers["x-switchboard-fallback"] == "upstream_5xx"
    after = scrape(gw)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    fallback = {"from_model": "m-flaky", "to_model": "m-flaky-fb", "reason": "upstream_5xx"}
    assert delta("switchboard_fallbacks_total", **fallback) == 1
    attempts = "switchboard_upstream_attempts_total"
    assert delta(attempts, provider="mock", model="m-flaky", outcome="upstream_5xx") == 2
    assert delta(attempts, provider="mock", model="m-flaky-fb", outcome="ok") == 1
    served = {"endpoint": "chat", "model": "m-flaky", "model_used": "m-flaky-fb", "status": "200"}
    assert delta("switchboard_requests_total", **served) == 1


def test_circuit_state_goes_from_closed_to_open(gw, http, mock_upstream):
    link = {"provider": "mock", "model": "m-brk"}
    assert [s.value for s in scrape(gw).find("switchboard_circuit_state", **link)] == [0]
    mock_upstream.script("metrics-brk", [], then={"status": 500})
    assert [chat(http, "m-brk").status_code for _ in range(2)] == [502, 502]  # threshold: two failed requests
    # acme is the only org using the link: its failures are an outage, the link opens for everyone
    # (and acme's own view with it; docs/resilience.md#org-views). With REDIS_URL the outage is
    # first confirmed against the other processes' users, 2 s later (CONFIRM_AFTER_S).
    deadline = time.monotonic() + 3.0 + SLACK_S
    while [s.value for s in scrape(gw).find("switchboard_circuit_state", **link)] != [1]:
        assert time.monotonic() < deadline, "the link did not open for its only org's failures"
        time.sleep(0.05)
    views = scrape(gw).find("switchboard_circuit_org_state", **link)
    assert [s.value for s in views] == [1]
    # by default the org is a keyed hash: /metrics is public and org names are tenant names
    assert views[0].labels["org"].startswith("org-") and "acme" not in httpx.get(f"{gw.url}/metrics").text
    assert chat(http, "m-brk").json()["error"]["code"] == "circuit_open"
    refused = {"endpoint": "chat", "model": "m-brk", "model_used": "m-brk", "status": "503"}
    assert scrape(gw).value("switchboard_requests_total", **refused) == 1


def test_usage_backlog_counts_the_records_not_yet_written(make_gateway, mock_upstream):
    # a gateway whose usage writer waits an hour between flushes: every record stays queued (no Redis: a
    # shared one left empty by an earlier test starts a rebuild whose spend read writes the queue first)
    held = make_gateway(
        CONFIG.format(mock=mock_upstream.url, extra=""), env={"SWITCHBOARD_USAGE_FLUSH_S": "3600", "REDIS_URL": ""}
    )
    assert [s.value for s in scrape(held).find("switchboard_usage_backlog")] == [0]
    with httpx.Client(base_url=held.url, headers={"Authorization": f"Bearer {held.api_key}"}, timeout=20) as c:
        assert [chat(c, "m-ok").status_code for _ in range(3)] == [200] * 3
    assert [s.value for s in scrape(held).find("switchboard_usage_backlog")] == [3]


def test_config_reload_is_counted_ok(gw, mock_upstream):
    ok = {"result": "ok"}
    before = scrape(gw).value("switchboard_config_reloads_total", **ok)
    gw.import_config(CONFIG.format(mock=mock_upstream.url, extra=EXTRA_MODEL))
    saved_at = time.monotonic()
    while scrape(gw).value("switchboard_config_reloads_total", **ok) <= before:
        waited = time.monotonic() - saved_at
        assert waited < 1.0 + SLACK_S, f"no config reload counted within {waited:.1f} s of the import"
        time.sleep(0.05)
    assert scrape(gw).value("switchboard_config_reloads_total", result="rejected") == 0
    assert scrape(gw).find("switchboard_circuit_state", provider="mock", model="m-new")


def test_private_metrics_refuse_anonymous_and_serve_staff(make_gateway, mock_upstream):
    private = make_gateway(CONFIG.format(mock=mock_upstream.url, extra=""), env={"SWITCHBOARD_METRICS_PUBLIC": "false"})
    anonymous = httpx.get(f"{private.url}/metrics", timeout=10)
    assert anonymous.status_code == 403
    assert anonymous.json()["error"]["code"] == "forbidden"
    assert "switchboard_requests_total" not in anonymous.text

    password = "metrics-staff-pw-1"
    manage(
        ["createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"],
        {**private.env, "DJANGO_SUPERUSER_PASSWORD": password},
    )
    with httpx.Client(base_url=private.url, timeout=10) as session:
        session.get("/admin/login/")
        login = session.post(
            "/admin/login/?next=/admin/",
            data={
                "username": "ops",
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
                "next": "/admin/",
            },
            headers={"Referer": f"{private.url}/admin/login/"},
        )
        assert login.status_code == 302, login.text[:500]
        staff = session.get("/metrics")
    assert staff.status_code == 200
    assert Scrape(staff.text).find("switchboard_usage_backlog")
