"""Overload end to end (docs/overload.md): a real server in front of a mock with a hard capacity.

Under a bounded burst larger than the deployment's concurrency limit, every interactive
request is served while batch requests that cannot start within their max wait are shed
with 503 `overloaded` and a Retry-After, and the upstream never sees more than its capacity.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from tests.e2e.harness import SLACK_S, MockUpstream

CAPACITY = 4

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: local
    dialect: openai
    base_url: {url}/v1
models:
  - id: ov-chat
    provider: local
    upstream_model: ov-chat
    capabilities: [chat]
    concurrency: {{initial: {cap}, max: {cap}, queue: 100}}
  - id: ov-first
    provider: local
    upstream_model: ov-slow
    capabilities: [chat]
    concurrency: {{initial: 1, max: 1}}
    fallbacks: [ov-spare]
  - id: ov-only
    provider: local
    upstream_model: ov-slow
    capabilities: [chat]
    concurrency: {{initial: 1, max: 1}}
  - id: ov-spare
    provider: local
    upstream_model: ov-spare
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
        priority: interactive
      - name: nightly
        priority: batch
"""


@pytest.fixture(scope="module")
def upstream():
    mock = MockUpstream()
    yield mock
    mock.stop()


@pytest.fixture(scope="module")
def gw(make_gateway, upstream):
    return make_gateway(CONFIG.format(url=upstream.url, cap=CAPACITY))


def _post(
    url: str, key: str, headers: dict[str, str] | None = None, model: str = "ov-chat"
) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    return r, time.monotonic() - started


def test_interactive_requests_all_succeed_while_batch_ones_are_shed_with_overloaded(gw, upstream):
    upstream.client.post(
        "/_control/script", json={"model": "ov-chat", "steps": [], "then": {"delay_ms": 150}, "capacity": CAPACITY}
    ).raise_for_status()
    nightly = gw.create_key("acme", "nightly")
    batch_wait = {"X-Switchboard-Max-Wait": "0.3"}
    lowered = {"X-Switchboard-Priority": "batch", **batch_wait}  # an interactive key lowers its class
    with concurrent.futures.ThreadPoolExecutor(36) as pool:
        batch = [pool.submit(_post, gw.url, nightly, batch_wait) for _ in range(16)]
        batch += [pool.submit(_post, gw.url, gw.api_key, lowered) for _ in range(8)]
        time.sleep(0.1)  # the batch flood is queued first
        interactive = [pool.submit(_post, gw.url, gw.api_key) for _ in range(12)]
        inter = [f.result()[0] for f in interactive]
        answers = [f.result() for f in batch]

    assert [r.status_code for r in inter] == [200] * 12, [r.text for r in inter if r.status_code != 200]
    shed = [(r, s) for r, s in answers if r.status_code == 503]
    assert shed, "a burst of 6x the capacity with a 0.3 s max wait must shed batch requests"
    for r, _ in shed:
        assert r.json()["error"]["code"] == "overloaded"
        assert int(r.headers["Retry-After"]) >= 1
    assert all(r.status_code in (200, 503) for r, _ in answers)
    assert upstream.calls("ov-chat")["over_capacity"] == 0  # the gateway kept within the capacity

    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text
    assert 'switchboard_shed_total{priority="batch",reason="deadline"}' in metrics
    assert 'switchboard_concurrency_limit{model="ov-chat"}' in metrics


def test_a_bad_priority_or_max_wait_header_is_a_clear_400(gw):
    r, _ = _post(gw.url, gw.api_key, {"X-Switchboard-Priority": "urgent"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "X-Switchboard-Priority"
    r, _ = _post(gw.url, gw.api_key, {"X-Switchboard-Max-Wait": "soon"})
    assert r.status_code == 400 and "X-Switchboard-Max-Wait" in r.json()["error"]["message"]


def test_a_request_that_cannot_start_in_time_is_shed_before_the_upstream_could_answer_and_falls_back(gw, upstream):
    upstream.script("ov-slow", then={"delay_ms": 1500})
    nightly = gw.create_key("acme", "nightly")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        # one call each first: the gates learn their round-trip (1.5 s), so their drain rate is known
        warm = [pool.submit(_post, gw.url, gw.api_key, None, m) for m in ("ov-first", "ov-only")]
        assert [f.result()[0].status_code for f in warm] == [200, 200]
        holders = [pool.submit(_post, gw.url, gw.api_key, None, m) for m in ("ov-first", "ov-only")]
        time.sleep(0.3)  # both one-slot gates now hold a 1.5 s call
        wait = {"X-Switchboard-Max-Wait": "0.5"}  # the next start is ~1.2 s away: it cannot start in time
        only, _ = _post(gw.url, nightly, wait, "ov-only")
        first, _ = _post(gw.url, nightly, wait, "ov-first")
        # answered while the calls holding the slots are still upstream: decided on arrival, not by waiting
        assert not any(h.done() for h in holders)
        assert [h.result()[0].status_code for h in holders] == [200, 200]

    assert only.status_code == 503 and only.json()["error"]["code"] == "overloaded"
    assert int(only.headers["Retry-After"]) >= 1
    assert first.status_code == 200, first.text  # shed on ov-first, served by its fallback
    assert first.headers["X-Switchboard-Model-Used"] == "ov-spare"
    assert first.headers["X-Switchboard-Fallback"] == "overloaded"
    assert upstream.count("ov-slow") == 4  # the shed requests never reached it


RELOAD_CONFIG = """
providers:
  - name: local
    dialect: openai
    base_url: {url}/v1
models:
  - id: ov-live
    provider: local
    upstream_model: ov-live
    capabilities: [chat]{limit}
orgs:
  - name: acme
    agents:
      - name: bot
"""


def test_a_limit_added_to_the_config_file_applies_in_every_serving_process(make_gateway, upstream):
    upstream.script("ov-live", then={"delay_ms": 600})
    gw = make_gateway(RELOAD_CONFIG.format(url=upstream.url, limit=""))
    other = gw.second_process({})
    try:
        gw.import_config(RELOAD_CONFIG.format(url=upstream.url, limit="\n    concurrency: {initial: 1, max: 1}"))
        for process in (gw, other):
            deadline = time.monotonic() + 1.0 + SLACK_S  # the reload's promise (docs/configuration.md#reload)
            while True:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    slow = pool.submit(_post, process.url, gw.api_key, None, "ov-live")
                    time.sleep(0.2)  # it holds the one slot once the limit is in place
                    r, _ = _post(process.url, gw.api_key, {"X-Switchboard-Max-Wait": "0"}, "ov-live")
                    assert slow.result()[0].status_code == 200
                if r.status_code == 503:
                    break
                assert r.status_code == 200 and time.monotonic() < deadline, "the limit did not reach this process"
            assert r.json()["error"]["code"] == "overloaded"
    finally:
        other.stop()


def test_two_processes_on_one_redis_keep_within_the_deployment_s_concurrency_together(
    make_gateway, upstream, redis_url
):
    """docs/overload.md#processes: `max` is the cluster's. Two processes, each given 8 of a burst of 16, split
    it through the shared limits' heartbeat: the upstream never sees more than its capacity and every request
    is served (per process, each would send the whole max: 8 at once, and 429s)."""
    from tests.e2e.test_shared_limits_outage import gauge, wait_for

    upstream.client.post(
        "/_control/script", json={"model": "ov-chat", "steps": [], "then": {"delay_ms": 300}, "capacity": CAPACITY}
    ).raise_for_status()
    a = make_gateway(CONFIG.format(url=upstream.url, cap=CAPACITY), env={"REDIS_URL": redis_url})
    b = a.second_process({"REDIS_URL": redis_url})
    try:
        for gw in (a, b):  # the first request starts the background tasks (daphne sends no lifespan)
            assert _post(gw.url, a.api_key)[0].status_code == 200
        for gw in (a, b):
            wait_for(lambda gw=gw: gauge(gw, "switchboard_limit_processes") == 2, 3 + SLACK_S, "both processes counted")
        over = upstream.calls("ov-chat")["over_capacity"]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(_post, gw.url, a.api_key) for gw in (a, b) * 8]
            answers = [f.result()[0] for f in futures]
        assert [r.status_code for r in answers] == [200] * 16, [r.text for r in answers if r.status_code != 200]
        assert upstream.calls("ov-chat")["over_capacity"] == over
    finally:
        b.stop()


def test_a_process_whose_clients_queue_takes_the_seats_an_idle_process_does_not_use(make_gateway, upstream, redis_url):
    """docs/overload.md#processes: the cluster's max is shared by demand. All the load on one of two processes:
    its limit grows past an even share (2 of 4) into the seats the idle one leaves, the upstream still never
    sees more than its capacity, and every request is served."""
    from tests.e2e.test_shared_limits_outage import gauge, wait_for

    upstream.client.post(
        "/_control/script", json={"model": "ov-chat", "steps": [], "then": {"delay_ms": 300}, "capacity": CAPACITY}
    ).raise_for_status()
    a = make_gateway(CONFIG.format(url=upstream.url, cap=CAPACITY), env={"REDIS_URL": redis_url})
    b = a.second_process({"REDIS_URL": redis_url})
    limit = 'switchboard_concurrency_limit{model="ov-chat"}'
    try:
        for gw in (a, b):
            assert _post(gw.url, a.api_key)[0].status_code == 200
        for gw in (a, b):
            wait_for(lambda gw=gw: gauge(gw, "switchboard_limit_processes") == 2, 3 + SLACK_S, "both processes counted")
        over = upstream.calls("ov-chat")["over_capacity"]
        seen = []
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(_post, a.url, a.api_key) for _ in range(16)]
            while not all(f.done() for f in futures):  # bounded: the 16 calls end within seconds
                seen.append(gauge(a, limit))
                time.sleep(0.05)
            answers = [f.result()[0] for f in futures]
        assert [r.status_code for r in answers] == [200] * 16, [r.text for r in answers if r.status_code != 200]
        assert upstream.calls("ov-chat")["over_capacity"] == over
        assert max(seen) > CAPACITY // 2, seen  # split evenly, its limit could never pass 2
    finally:
        b.stop()
