"""Deployments end to end (docs/deployments.md): two mock upstream processes as two providers,
a real server (daphne or uvicorn) and the official openai client.

Every scenario has its own upstream model name, so scripts and breakers never cross tests.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import MockUpstream
from tests.e2e.test_usage_e2e import usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 2
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 3
  breaker_cooldown_s: 60
providers:
  - name: east
    dialect: openai
    base_url: {east}/v1
  - name: west
    dialect: openai
    base_url: {west}/v1
models:
  - id: lb-weighted
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: lb-weighted, weight: 3}}
      - {{provider: west, upstream_model: lb-weighted, weight: 1}}
  - id: lb-bad
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: lb-bad}}
      - {{provider: west, upstream_model: lb-bad}}
  - id: lb-open
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: lb-open}}
      - {{provider: west, upstream_model: lb-open}}
    fallbacks: [lb-open-fb]
  - id: lb-open-fb
    provider: east
    upstream_model: lb-open-fb
    capabilities: [chat]
  - id: lb-rpm
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: lb-rpm, weight: 100, rpm: 5}}
      - {{provider: west, upstream_model: lb-rpm, weight: 1}}
  - id: lb-cap
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: lb-cap, rpm: 2}}
orgs:
  - name: acme
    agents:
      - name: bot
"""

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def west_upstream():
    mock = MockUpstream()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream, west_upstream):
    return make_gateway(CONFIG.format(east=mock_upstream.url, west=west_upstream.url))


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=30)


def _serve(client, model: str):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=HI)
    raw.parse()
    return raw


def test_weights_3_to_1_over_400_requests(gw, client, mock_upstream, west_upstream):
    east0, west0 = mock_upstream.count("lb-weighted"), west_upstream.count("lb-weighted")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        raws = list(pool.map(lambda _: _serve(client, "lb-weighted"), range(400)))
    used = [r.headers["x-switchboard-provider-used"] for r in raws]
    east, west = mock_upstream.count("lb-weighted") - east0, west_upstream.count("lb-weighted") - west0
    assert (east, west) == (used.count("east"), used.count("west"))  # the header names who served
    assert east + west == 400
    # expected 300 / 100; the standard deviation is 8.7: 5 of them
    assert abs(east - 300) <= 45, (east, west)
    assert all(r.headers["x-switchboard-model-used"] == "lb-weighted" for r in raws)

    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    attempts = {
        s.labels["provider"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "switchboard_upstream_attempts_total"
        and s.labels.get("model") == "lb-weighted"
        and s.labels.get("outcome") == "ok"
    }
    assert attempts == {"east": east, "west": west}

    def recorded() -> dict[str, int]:
        rows = [r for r in usage_rows(gw.database_url) if r["model_used"] == "lb-weighted"]
        return {p: sum(1 for r in rows if r["provider"] == p) for p in ("east", "west")}

    wait_for(lambda: sum(recorded().values()) == 400, 30, "the 400 usage records")
    assert recorded() == {"east": east, "west": west}  # each record names the deployment that served


def test_a_deployment_answering_500_forever_is_bounded_by_its_breaker(client, mock_upstream, west_upstream):
    mock_upstream.script("lb-bad", [], then={"status": 500})
    for _ in range(40):
        raw = _serve(client, "lb-bad")
        assert raw.status_code == 200
        assert raw.headers["x-switchboard-provider-used"] == "west"
        assert "x-switchboard-fallback" not in raw.headers  # the same model served: no fallback
    assert mock_upstream.count("lb-bad") <= 3  # one try per failed request, then its breaker opens
    assert west_upstream.count("lb-bad") == 40


def test_both_deployments_open_falls_back_to_the_next_model_with_circuit_open(client, mock_upstream, west_upstream):
    mock_upstream.script("lb-open", [], then={"status": 500})
    west_upstream.script("lb-open", [], then={"status": 503})
    for _ in range(3):
        raw = _serve(client, "lb-open")
        assert raw.headers["x-switchboard-model-used"] == "lb-open-fb"
        assert raw.headers["x-switchboard-fallback"] == "upstream_5xx"
        assert raw.headers["x-switchboard-attempts"] == "4"  # 1 + max_retries over the deployments, 1 fallback
    before = mock_upstream.count("lb-open"), west_upstream.count("lb-open")
    raw = _serve(client, "lb-open")
    assert raw.status_code == 200
    assert raw.headers["x-switchboard-model-used"] == "lb-open-fb"
    assert raw.headers["x-switchboard-fallback"] == "circuit_open"
    assert raw.headers["x-switchboard-attempts"] == "1"
    assert (mock_upstream.count("lb-open"), west_upstream.count("lb-open")) == before


def test_a_deployment_at_its_rpm_is_skipped_and_the_other_serves(client, mock_upstream, west_upstream):
    start = time.monotonic()
    raws = [_serve(client, "lb-rpm") for _ in range(20)]
    elapsed = time.monotonic() - start
    assert all(r.status_code == 200 for r in raws)
    east = mock_upstream.count("lb-rpm")
    allowed = 5 + int(elapsed * 5 / 60)  # rpm 5 refills one request every 12 s
    assert 5 <= east <= allowed, (east, elapsed)  # weight 100:1 would send it nearly all 20
    assert west_upstream.count("lb-rpm") == 20 - east
    used = [r.headers["x-switchboard-provider-used"] for r in raws]
    assert used.count("east") == east  # the header names the deployment that served


def test_capacity_alone_answers_429_upstream_rate_limited_with_retry_after(gw, client, mock_upstream):
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as http:
        statuses = []
        for _ in range(3):
            response = http.post("/v1/chat/completions", json={"model": "lb-cap", "messages": HI})
            statuses.append(response.status_code)
        assert statuses[:2] == [200, 200]
        assert response.status_code == 429
        body = response.json()["error"]
        assert body["code"] == "upstream_rate_limited" and "capacity" in body["message"]
        assert 1 <= int(response.headers["retry-after"]) <= 30
    assert mock_upstream.count("lb-cap") == 2
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="lb-cap", messages=HI)
