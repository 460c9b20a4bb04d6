"""Breaker transitions shared by two gateway processes over Redis (docs/scale-out.md#shared-breakers).

Two real server processes on one database and a redis-server of the test's own (so it
can be stopped): a link opened by failures that process 1 saw is refused by process 2
without an upstream call; after the cooldown exactly one probe reaches the upstream
across both; with Redis stopped under load every request is still answered, both say
`switchboard_degraded{component="redis"} 1` and log it once; when Redis is back the
gauge returns to 0 and sharing works again.
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import SLACK_S, Gateway, RedisServer

COOLDOWN_S = 3
CONFIG = f"""
resilience:
  max_retries: 0
  breaker_failure_threshold: 2
  breaker_cooldown_s: {COOLDOWN_S}
providers:
  - name: mock
    dialect: openai
    base_url: {{mock}}/v1
models:
  - id: shared
    provider: mock
    upstream_model: up-shared
    capabilities: [chat]
  - id: steady
    provider: mock
    upstream_model: up-steady
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
  - name: beta
    agents:
      - name: bot
"""
UPSTREAM = "up-shared"
UNREACHABLE = "Redis is unreachable"


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pair(make_gateway, mock_upstream, redis_server):
    env = {"REDIS_URL": redis_server.url, "SWITCHBOARD_METRICS_ORG_NAMES": "true"}  # metrics name the org
    one = make_gateway(CONFIG.format(mock=mock_upstream.url), env=env)
    two = Gateway(one.database_url, one.config_yaml, Path(tempfile.mkdtemp(prefix="switchboard-gw2-")), env)
    two.api_key = one.api_key
    two.serve()
    beta = one.create_key("beta", "bot")
    try:
        for gw in (one, two):
            wait_metric(gw, "switchboard_degraded", 0, component="redis")  # both subscribed
        yield one, two, beta
    finally:
        two.stop()


def chat(gw: Gateway, key: str, model: str = "shared") -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=20,
    )


def code(response: httpx.Response) -> str | None:
    return None if response.status_code == 200 else response.json()["error"]["code"]


def metric(gw: Gateway, name: str, **labels: str) -> float | None:
    for line in httpx.get(f"{gw.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def wait_metric(gw: Gateway, name: str, value: float, within_s: float = 5.0, **labels: str) -> float:
    """Seconds until the metric reads `value` on gw (fails after within_s)."""
    start = time.monotonic()
    while (seen := metric(gw, name, **labels)) != value:
        assert time.monotonic() - start < within_s, f"{gw.url}: {name}{labels} is {seen}, not {value}"
        time.sleep(0.05)
    return time.monotonic() - start


def open_on(gw: Gateway, keys: tuple[str, str], mock_upstream) -> None:
    """Trip the shared breaker of `shared` on gw: one failed request from each of two orgs."""
    mock_upstream.script(UPSTREAM, [], then={"status": 500})
    for key in keys:
        assert code(chat(gw, key)) == "upstream_error"
    assert metric(gw, "switchboard_circuit_state", provider="mock", model="shared") == 1


def start_closed(one: Gateway, two: Gateway) -> None:
    """Tests share the two processes (in random order): start with `shared` closed on both."""
    if (
        metric(one, "switchboard_circuit_state", provider="mock", model="shared")
        == 0
        == metric(two, "switchboard_circuit_state", provider="mock", model="shared")
    ):
        return
    one.manage("breaker", "reset", "mock", "shared")
    for gw in (one, two):
        wait_metric(gw, "switchboard_circuit_state", 0, within_s=5.0 + SLACK_S, provider="mock", model="shared")


def test_an_open_link_is_refused_by_the_other_process_and_probed_once_for_both(pair, mock_upstream):
    one, two, beta = pair
    start_closed(one, two)
    open_on(one, (one.api_key, beta), mock_upstream)
    took = wait_metric(two, "switchboard_circuit_state", 1, within_s=1.0 + SLACK_S, provider="mock", model="shared")
    before = mock_upstream.count(UPSTREAM)
    refused = chat(two, one.api_key)
    assert refused.status_code == 503 and code(refused) == "circuit_open", refused.text
    assert int(refused.headers["retry-after"]) <= COOLDOWN_S  # the same cooldown, not a fresh one
    assert mock_upstream.count(UPSTREAM) == before  # process 2 never called the upstream
    print(f"process 2 learned the open within {took:.2f} s")

    # After the cooldown, requests hammer both processes while the probe is slow (and fails):
    # exactly one upstream call for the whole cluster, everything else refused.
    mock_upstream.script(UPSTREAM, [{"status": 500, "delay_ms": 1500}], then={"status": 500})
    time.sleep(COOLDOWN_S)
    outcomes: list[str | None] = []
    stop = threading.Event()

    def worker(gw: Gateway) -> None:
        deadline = time.monotonic() + 15
        while not stop.is_set() and time.monotonic() < deadline:
            outcome = code(chat(gw, one.api_key))
            outcomes.append(outcome)
            if outcome != "circuit_open":
                stop.set()  # the probe came back: the link re-opened everywhere
            time.sleep(0.01)

    threads = [threading.Thread(target=worker, args=(gw,)) for gw in (one, two, one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mock_upstream.count(UPSTREAM) == before + 1, outcomes
    assert outcomes.count("upstream_error") == 1 and set(outcomes) == {"upstream_error", "circuit_open"}

    # The next probe succeeds: the link closes in both processes.
    mock_upstream.script(UPSTREAM, [], then={"status": 200})
    deadline = time.monotonic() + COOLDOWN_S + 10
    while chat(one, one.api_key).status_code != 200:
        assert time.monotonic() < deadline, "process 1 never closed the link"
        time.sleep(0.1)
    wait_metric(two, "switchboard_circuit_state", 0, within_s=1.0 + SLACK_S, provider="mock", model="shared")
    assert chat(two, one.api_key).status_code == 200


def test_one_orgs_own_view_opened_on_process_1_refuses_that_org_on_process_2(pair, mock_upstream):
    one, two, beta = pair
    mock_upstream.script("up-steady", [], then={"status": 500}, when={"field": "user", "equals": "bad-acme"})
    assert chat(one, beta, "steady").status_code == 200  # beta uses the link too: acme's failures are acme's
    for _ in range(2):
        response = httpx.post(
            f"{one.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {one.api_key}"},
            json={"model": "steady", "user": "bad-acme", "messages": [{"role": "user", "content": "hi"}]},
            timeout=20,
        )
        assert code(response) == "upstream_error"
    labels = {"provider": "mock", "model": "steady", "org": "acme"}
    wait_metric(two, "switchboard_circuit_org_state", 1, within_s=1.0 + SLACK_S, **labels)
    before = mock_upstream.count("up-steady")
    assert code(chat(two, one.api_key, "steady")) == "circuit_open"  # acme: refused without a call
    assert mock_upstream.count("up-steady") == before
    assert chat(two, beta, "steady").status_code == 200  # beta is served by the same link
    assert metric(two, "switchboard_circuit_state", provider="mock", model="steady") == 0
    one.manage("breaker", "reset", "mock", "steady")  # closes acme's view too, in both processes
    wait_metric(two, "switchboard_circuit_org_state", 0, within_s=1.0 + SLACK_S, **labels)
    mock_upstream.script("up-steady", [], then={"status": 200}, when={"field": "user", "equals": "bad-acme"})
    assert chat(two, one.api_key, "steady").status_code == 200


def test_redis_stopped_under_load_fails_nothing_and_sharing_resumes(pair, mock_upstream, redis_server):
    one, two, beta = pair
    start_closed(one, two)
    mock_upstream.script(UPSTREAM, [], then={"status": 200})
    redis_server.stop()
    statuses: list[int] = []
    for i in range(30):  # bounded load on both processes while Redis is gone
        statuses.append(chat((one, two)[i % 2], (one.api_key, beta)[i // 2 % 2], "steady").status_code)
        statuses.append(chat((one, two)[i % 2], one.api_key).status_code)
        time.sleep(0.02)
    for gw in (one, two):
        wait_metric(gw, "switchboard_degraded", 1, component="redis")
    for _ in range(20):
        statuses.append(chat(one, one.api_key).status_code)
        statuses.append(chat(two, beta).status_code)
    assert set(statuses) == {200}, statuses
    for gw in (one, two):
        # lines of the gateway's own handler (daphne's root handler repeats them with a timestamp)
        said = [line for line in gw.logs().splitlines() if line.startswith(UNREACHABLE)]
        parts = [line.rsplit("): ", 1)[-1] for line in said]  # "breakers are per process …", "affinity pins …"
        assert said and len(parts) == len(set(parts)), said  # each part that uses Redis says it once, not per retry

    redis_server.start()
    for gw in (one, two):
        wait_metric(gw, "switchboard_degraded", 0, within_s=15, component="redis")  # backoff is at most 5 s
    open_on(one, (one.api_key, beta), mock_upstream)
    wait_metric(two, "switchboard_circuit_state", 1, within_s=1.0 + SLACK_S, provider="mock", model="shared")
    before = mock_upstream.count(UPSTREAM)
    assert code(chat(two, beta)) == "circuit_open"
    assert mock_upstream.count(UPSTREAM) == before
