"""A deployment's rpm shared by two real gateway processes through a real Redis (docs/deployments.md#capacity):
the capped deployment serves its capacity across both processes combined, the other deployment
serves the rest, every client gets a 200. Per process it would serve twice its capacity. With
Redis cut (through a proxy), each process carries on with an even share (docs/limits.md#fail-open).
"""

from __future__ import annotations

import time
import uuid

import openai
import pytest

from tests.e2e.harness import SLACK_S, Gateway
from tests.e2e.tcp_proxy import redis_behind_proxy
from tests.e2e.test_shared_limits_outage import degraded, gauge, wait_for

RPM = 10

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: east
    dialect: openai
    base_url: {mock}/v1
  - name: west
    dialect: openai
    base_url: {mock}/v1
models:
  - id: cap-chat
    capabilities: [chat]
    deployments:
      - {{provider: east, upstream_model: {east}, weight: 100, rpm: {rpm}}}
      - {{provider: west, upstream_model: {west}, weight: 1}}
orgs:
  - name: acme
    agents:
      - name: bot{agent}
"""


def start_two(
    make_gateway, mock_upstream, rpm: int, redis_url: str, agent: str = ""
) -> tuple[Gateway, Gateway, str, str]:
    """Two gateways on one database (so one cluster, docs/limits.md#shared) and one Redis."""
    tag = uuid.uuid4().hex[:6]
    east, west = f"cap-east-{tag}", f"cap-west-{tag}"
    text = CONFIG.format(mock=mock_upstream.url, east=east, west=west, rpm=rpm, agent=agent)
    shared = {"REDIS_URL": redis_url}
    a = make_gateway(text, env=shared)
    b = a.second_process(shared)
    return a, b, east, west


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=30)


def serve(c: openai.OpenAI) -> str:
    """One chat request that must answer 200 (the client raises on anything else); the deployment that served."""
    raw = c.chat.completions.with_raw_response.create(model="cap-chat", messages=[{"role": "user", "content": "hi"}])
    raw.parse()
    assert raw.status_code == 200
    return raw.headers["x-switchboard-provider-used"]


@pytest.fixture
def two_processes(make_gateway, mock_upstream, redis_url):
    a, b, east, west = start_two(make_gateway, mock_upstream, RPM, redis_url)
    yield a, b, east, west
    b.stop()
    a.stop()  # not left running (until the module's end) under the next test


def test_a_deployment_rpm_holds_across_two_processes_and_the_other_serves_the_rest(two_processes, mock_upstream):
    a, b, east, west = two_processes
    clients = [openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=30) for gw in (a, b)]
    started = time.monotonic()
    used = []
    for client in clients * 20:  # alternating, 20 requests on each process
        raw = client.chat.completions.with_raw_response.create(
            model="cap-chat", messages=[{"role": "user", "content": "hi"}]
        )
        raw.parse()  # a 200 with a body (the client raises on anything else)
        assert raw.status_code == 200
        used.append(raw.headers["x-switchboard-provider-used"])
    elapsed = time.monotonic() - started
    served_east, served_west = mock_upstream.count(east), mock_upstream.count(west)
    assert (served_east, served_west) == (used.count("east"), used.count("west"))
    assert served_east + served_west == 40
    # Weight 100:1 sends east all it can take. Per process it would take 10 on each (20). Shared:
    # the cluster bucket's 10 plus what refills meanwhile (one per 6 s), less at most the one-request
    # share each process may still hold unused (docs/limits.md#shared, error bounds).
    refill = int(elapsed * RPM / 60) + 1
    # A round slower than the Redis timeout on a loaded machine fails open (docs/limits.md#fail-open),
    # with other bounds: the processes' logs say so when the count is off.
    said = [line for gw in (a, b) for line in gw.logs().splitlines() if line.startswith("shared limits:")]
    assert RPM - 2 <= served_east <= RPM + refill, (served_east, served_west, elapsed, said)
    assert elapsed < 60 + SLACK_S  # the bound above is for well under a minute


OUTAGE_RPM = 20


@pytest.fixture
def behind_proxy(make_gateway, mock_upstream, redis_url):
    proxy, url = redis_behind_proxy(redis_url)
    # A generous agent limit too, so both processes' syncers have something to share whatever
    # the deployments do (the heartbeat count the even share divides by).
    agent = "\n        limits: {rpm: 6000}"
    a, b, east, west = start_two(make_gateway, mock_upstream, OUTAGE_RPM, url, agent)
    yield proxy, a, b, east, west
    b.stop()
    a.stop()  # left running, its rounds would go on failing against the stopped proxy under the next test
    proxy.stop()


def test_redis_cut_each_process_serves_an_even_share_of_the_deployment_and_nothing_fails(behind_proxy, mock_upstream):
    proxy, a, b, east, west = behind_proxy
    ca, cb = client(a), client(b)
    for c in (ca, cb, ca, cb):  # shared: both processes lease shares of the cluster bucket
        serve(c)
    wait_for(lambda: gauge(a, "switchboard_limit_processes") == 2, 2 + SLACK_S, "A to see both processes")
    assert degraded(a) == 0

    logged_before = len(a.logs().splitlines())
    proxy.cut()
    east_before = mock_upstream.count(east)
    started = time.monotonic()
    used = [serve(ca) for _ in range(30)]  # every one a 200: never refused because Redis is down
    elapsed = time.monotonic() - started
    served_east = mock_upstream.count(east) - east_before
    assert served_east == used.count("east")
    # A's even share is a full local bucket of 20 ÷ 2, + the one-request share it may still hold,
    # + its refill at rate ÷ 2 (one per 6 s); the other deployment serves the rest.
    assert 10 <= served_east <= 11 + int(elapsed / 6) + 1, (used, elapsed)
    assert used.count("west") == 30 - served_east
    assert degraded(a) == 1
    lines = a.logs().splitlines()[logged_before:]
    assert len([line for line in lines if line.startswith("shared limits: Redis unreachable")]) == 1

    proxy.restore()
    wait_for(lambda: degraded(a) == 0, 5 + SLACK_S, "A to share through Redis again")
    assert serve(cb) in ("east", "west")
