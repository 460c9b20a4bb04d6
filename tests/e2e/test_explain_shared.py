"""explain_route tells what requests meet, from a process that did not open anything.

Two real server processes on one database and one Redis (a redis-server of the test's
own): an org's view of a link, then the link itself, opened by requests on process 1;
`manage.py explain_route` (a third process, serving nothing) and the admin's explain page
on process 2 report the open view or link that real requests hit, and the link served
again once it is reset (docs/commands.md#explain_route).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.harness import SLACK_S, Gateway, RedisServer
from tests.e2e.test_shared_breakers import chat, code, wait_metric

CONFIG = """
resilience:
  max_retries: 0
  breaker_failure_threshold: 2
  breaker_cooldown_s: 120
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: explained
    provider: mock
    upstream_model: up-explained
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""


@pytest.fixture(scope="module")
def pair(make_gateway, mock_upstream):
    redis_server = RedisServer()
    env = {"REDIS_URL": redis_server.url, "SWITCHBOARD_METRICS_ORG_NAMES": "true"}  # metrics name the org
    one = make_gateway(CONFIG.format(mock=mock_upstream.url), env=env)
    two = Gateway(one.database_url, one.config_yaml, Path(tempfile.mkdtemp(prefix="switchboard-gw2-")), env)
    two.api_key = one.api_key
    try:
        two.serve()
        beta = one.create_key("beta", "bot")
        for gw in (one, two):
            wait_metric(gw, "switchboard_degraded", 0, component="redis")  # both subscribed
        yield one, two, beta
    finally:
        two.stop()
        redis_server.stop()


def explain_cli(gw: Gateway, org: str, model: str) -> dict:
    """`manage.py explain_route --json`: a process of its own, serving nothing, on the cluster's Redis."""
    return orjson.loads(gw.manage("explain_route", "--org", org, "--model", model, "--json").stdout)


def explain_admin(gw: Gateway, org: str, model: str) -> str:
    """The admin's explain page, as a superuser, served by `gw`."""
    password = "explain-pass-1234"
    gw.manage("createsuperuser", "--noinput", "--username", f"ops-{org}", "--email", "ops@example.com", check=False)
    gw.manage(
        "shell",
        "-c",
        f"from django.contrib.auth.models import User; u = User.objects.get(username='ops-{org}'); "
        f"u.set_password('{password}'); u.save()",
    )
    with httpx.Client(base_url=gw.url, timeout=10) as staff:
        page = staff.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        staff.post("/admin/login/", data={"username": f"ops-{org}", "password": password, "csrfmiddlewaretoken": token})
        answer = staff.get("/admin/explain-route/", params={"org": org, "model": model, "kind": "chat"})
        assert answer.status_code == 200 and 'id="explain-result"' in answer.text, answer.text[:300]
        return answer.text


def test_explain_route_reports_what_requests_meet_from_another_process(pair, mock_upstream):
    one, two, beta = pair
    upstream = "up-explained"
    mock_upstream.script(upstream, [], then={"status": 500}, when={"field": "user", "equals": "bad-acme"})
    assert chat(one, beta, "explained").status_code == 200  # beta uses the link: acme's failures are acme's
    for _ in range(2):
        response = httpx.post(
            f"{one.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {one.api_key}"},
            json={"model": "explained", "user": "bad-acme", "messages": [{"role": "user", "content": "hi"}]},
            timeout=20,
        )
        assert code(response) == "upstream_error"
    labels = {"provider": "mock", "model": "explained", "org": "acme"}
    wait_metric(two, "switchboard_circuit_org_state", 1, within_s=1.0 + SLACK_S, **labels)
    assert code(chat(two, one.api_key, "explained")) == "circuit_open"  # what acme's requests meet

    seen = explain_cli(one, "acme", "explained")
    assert seen["serves"] is None and seen["error"]["code"] == "circuit_open", seen
    assert seen["chain"][0]["org_view"] == "open" and seen["breakers_from"] == "cluster"
    assert explain_cli(one, "beta", "explained")["serves"] == "explained"  # beta is still served
    page = explain_admin(two, "acme", "explained")  # the process that did not open it
    assert "open for org acme" in page and "circuit_open" in page

    # beta fails too: the run of failures is two orgs', the link itself opens, for everyone.
    mock_upstream.script(upstream, [], then={"status": 500})
    assert code(chat(one, beta, "explained")) == "upstream_error"
    wait_metric(two, "switchboard_circuit_state", 1, within_s=1.0 + SLACK_S, provider="mock", model="explained")
    assert code(chat(two, beta, "explained")) == "circuit_open"
    seen = explain_cli(two, "beta", "explained")
    assert seen["chain"][0]["breaker"] == "open" and seen["error"]["code"] == "circuit_open"
    one.manage("breaker", "reset", "mock", "explained")
    mock_upstream.script(upstream, [], then={"status": 200})
    wait_metric(two, "switchboard_circuit_state", 0, within_s=1.0 + SLACK_S, provider="mock", model="explained")
    deadline = time.monotonic() + 1.0 + SLACK_S
    while explain_cli(one, "beta", "explained")["serves"] != "explained":  # the close reached Redis too
        assert time.monotonic() < deadline, "explain_route still reports the reset link open"
