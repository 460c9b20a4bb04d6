"""The response cache end to end (docs/cache.md): real servers, the real mock upstream, the official client.

One gateway (whatever store the environment gives it: the LRU, or Redis in CI's
Redis pass) for hits, org scope, expiry and coalescing; two gateways sharing a
Redis for a hit on B of an answer stored by A; and a gateway on a redis-server of
the test's own that is stopped under load and started again.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from routing.plan.cache_key import cache_key
from tests.e2e.harness import SLACK_S, Gateway, RedisServer
from tests.e2e.test_metrics_e2e import scrape
from tests.e2e.test_usage_e2e import usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: cached-chat
    provider: mock
    upstream_model: cache-x-chat
    capabilities: [chat]
    cache_ttl_s: 300
    input_price_per_mtok: 1
    output_price_per_mtok: 2
  - id: short-chat
    provider: mock
    upstream_model: cache-x-short
    capabilities: [chat]
    cache_ttl_s: 1
  - id: slow-chat
    provider: mock
    upstream_model: cache-x-slow
    capabilities: [chat]
    cache_ttl_s: 300
orgs:
  - name: acme
    agents:
      - name: bot
  - name: globex
    agents:
      - name: bot
"""


def client(gw: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key or gw.api_key, max_retries=0, timeout=30)


def ask(c: openai.OpenAI, model: str, prompt: str, **extra):
    return c.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], **extra
    )


def unique(label: str) -> str:
    return f"{label} {uuid.uuid4().hex}"  # entries of an earlier run (a shared Redis) never match


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


def test_the_second_identical_request_is_a_hit_with_no_upstream_call(gw, mock_upstream):
    c = client(gw)
    prompt = unique("hit me twice")
    before = mock_upstream.count("cache-x-chat")
    first = ask(c, "cached-chat", prompt, temperature=0)
    assert first.headers["x-switchboard-cache"] == "miss"
    second = ask(c, "cached-chat", prompt, temperature=0)
    assert second.headers["x-switchboard-cache"] == "hit"
    assert second.headers["x-switchboard-model-used"] == "cached-chat"
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert mock_upstream.count("cache-x-chat") == before + 1
    bypassed = ask(c, "cached-chat", prompt, temperature=0, extra_headers={"Cache-Control": "no-cache"})
    assert bypassed.headers["x-switchboard-cache"] == "bypass"
    assert mock_upstream.count("cache-x-chat") == before + 2

    ids = [r.headers["x-request-id"] for r in (first, second, bypassed)]

    def records() -> dict[str, dict]:
        return {row["request_id"]: row for row in usage_rows(gw.database_url) if row["request_id"] in ids}

    wait_for(lambda: len(records()) == 3, 5, "the three usage records")
    rows = records()
    assert [(bool(rows[i]["cached"]), rows[i]["attempts"]) for i in ids] == [(False, 1), (True, 0), (False, 1)]
    assert float(rows[ids[1]]["cost"]) == 0 and float(rows[ids[0]]["cost"]) > 0
    assert rows[ids[1]]["model_used"] == "cached-chat"


def test_another_org_misses_the_same_request(gw, mock_upstream):
    prompt = unique("org scoped")
    assert ask(client(gw), "cached-chat", prompt).headers["x-switchboard-cache"] == "miss"
    other_key = gw.create_key("globex", "bot")
    before = mock_upstream.count("cache-x-chat")
    other = ask(client(gw, other_key), "cached-chat", prompt)
    assert other.headers["x-switchboard-cache"] == "miss"
    assert mock_upstream.count("cache-x-chat") == before + 1


def test_an_expired_entry_is_a_miss(gw, mock_upstream):
    c = client(gw)
    prompt = unique("short lived")
    stored_at = time.monotonic()
    assert ask(c, "short-chat", prompt).headers["x-switchboard-cache"] == "miss"
    time.sleep(max(0.0, stored_at + 1.2 - time.monotonic()))  # past the 1 s TTL, whatever the load
    before = mock_upstream.count("cache-x-short")
    assert ask(c, "short-chat", prompt).headers["x-switchboard-cache"] == "miss"
    assert mock_upstream.count("cache-x-short") == before + 1


def test_ten_identical_concurrent_requests_make_one_upstream_call(gw, mock_upstream):
    mock_upstream.script("cache-x-slow", [{"delay_ms": 1500}])
    prompt = unique("all at once")
    before = mock_upstream.count("cache-x-slow")
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: ask(client(gw), "slow-chat", prompt), range(10)))
    assert [a.http_response.status_code for a in answers] == [200] * 10
    assert mock_upstream.count("cache-x-slow") == before + 1
    assert sorted(a.headers["x-switchboard-cache"] for a in answers).count("miss") == 1
    assert scrape(gw).value("switchboard_cache_total", model="slow-chat", result="coalesced") >= 1


# --- Redis shared by two processes ---------------------------------------------------


# These tests are about sharing across processes, not about the lookup's 100 ms bound (the hung
# Redis test below holds that): on the loaded 2-core CI machine a lookup now and then takes longer,
# fails open (`bypass`) and the request calls the upstream itself, a second call these tests count.
SHARED = {"SWITCHBOARD_CACHE_REDIS_TIMEOUT_MS": "2000"}


@pytest.fixture(scope="module")
def two_processes(make_gateway, mock_upstream, redis_url):
    config = CONFIG.format(mock=mock_upstream.url)
    a = make_gateway(config, env={"REDIS_URL": redis_url, **SHARED})
    b = Gateway(
        database_url=a.database_url,
        config_yaml=config,
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-b-")),
        extra_env={"REDIS_URL": redis_url, **SHARED},
    )
    b.start()
    # Ready means serving from Redis, not only listening: a process connects to Redis once its
    # background tasks start (its first request, on daphne), so whichever of these tests ran first
    # paid both processes' connects inside its lookups (reverse order: the in-flight one failed).
    for gw in (a, b):
        body = {"model": "cached-chat", "messages": [{"role": "user", "content": unique("warm-up")}]}
        warm = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=_auth(gw), timeout=20)
        assert warm.headers["x-switchboard-cache"] == "miss", warm.headers
    yield a, b
    b.stop()


def test_an_answer_stored_by_one_process_is_a_hit_on_another(two_processes, mock_upstream):
    a, b = two_processes
    prompt = unique("shared")
    body = {"model": "cached-chat", "messages": [{"role": "user", "content": prompt}]}
    before = mock_upstream.count("cache-x-chat")
    first = httpx.post(f"{a.url}/v1/chat/completions", json=body, headers=_auth(a), timeout=20)
    assert first.headers["x-switchboard-cache"] == "miss"
    _wait_for_key(a.env["REDIS_URL"], cache_key("chat", "acme", "cached-chat", "cache-x-chat", body))
    second = httpx.post(f"{b.url}/v1/chat/completions", json=body, headers=_auth(b), timeout=20)
    assert second.headers["x-switchboard-cache"] == "hit"
    assert second.content == first.content
    assert mock_upstream.count("cache-x-chat") == before + 1


def test_identical_requests_in_flight_on_two_processes_make_one_upstream_call(two_processes, mock_upstream):
    a, b = two_processes
    mock_upstream.script("cache-x-slow", [{"delay_ms": 1500}])
    body = {"model": "slow-chat", "messages": [{"role": "user", "content": unique("both at once")}]}
    before = mock_upstream.count("cache-x-slow")

    def send(gw: Gateway) -> httpx.Response:
        return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=_auth(gw), timeout=30)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, [a, b] * 4))
    assert [r.status_code for r in answers] == [200] * 8
    said = [gw.logs() for gw in (a, b)]
    assert "bypass" not in [r.headers["x-switchboard-cache"] for r in answers], said  # Redis failed: the logs say why
    assert mock_upstream.count("cache-x-slow") == before + 1
    assert len({r.content for r in answers}) == 1
    assert [r.headers["x-switchboard-cache"] for r in answers].count("miss") == 1


def _auth(gw: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {gw.api_key}"}


def _wait_for_key(redis_url: str, key: str) -> None:
    """A writes the answer to Redis just after answering (off the request path); wait for it."""
    import redis

    r = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 1.0 + SLACK_S
        while not r.exists(key):
            assert time.monotonic() < deadline, "process A never stored its answer in Redis"
            time.sleep(0.01)
    finally:
        r.close()


# --- our own Redis, stopped under load ------------------------------------------------


@pytest.fixture
def own_redis():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def on_own_redis(make_gateway, mock_upstream, own_redis):
    """A gateway on the test's own Redis, stopped with the test: left running (until the module's
    end) it would go on probing a stopped Redis under the next tests."""
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url), env={"REDIS_URL": own_redis.url})
    yield gw
    gw.stop()


def _wait_for_degraded(gw: Gateway, value: float) -> None:
    deadline = time.monotonic() + 1.0 + SLACK_S
    while scrape(gw).value("switchboard_degraded", component="redis") != value:
        assert time.monotonic() < deadline, f"switchboard_degraded{{component=redis}} never became {value}"
        time.sleep(0.05)


def test_redis_stopped_under_load_every_request_is_served_then_the_cache_recovers(
    on_own_redis, mock_upstream, own_redis
):
    gw = on_own_redis
    prompts = [unique(f"load {i}") for i in range(4)]
    statuses: list[int] = []
    results: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def load(n: int) -> None:
        with httpx.Client(base_url=gw.url, headers=_auth(gw), timeout=20) as http:
            for i in range(2000):  # bounded: the test stops the load once it has seen the outage
                if stop.is_set():
                    return
                body = {"model": "cached-chat", "messages": [{"role": "user", "content": prompts[(n + i) % 4]}]}
                answer = http.post("/v1/chat/completions", json=body)
                with lock:
                    statuses.append(answer.status_code)
                    results.append(answer.headers.get("x-switchboard-cache", ""))

    workers = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    try:
        deadline = time.monotonic() + 10 + SLACK_S
        while len(statuses) < 20:  # the cache is in use before Redis goes away
            assert time.monotonic() < deadline, f"the load never got going: {results}"
            time.sleep(0.01)
        assert "hit" in results
        own_redis.stop()
        _wait_for_degraded(gw, 1)
        seen = len(results)
        deadline = time.monotonic() + 10 + SLACK_S
        while results[seen:].count("bypass") < 20:  # served from the upstream while Redis is away
            assert time.monotonic() < deadline, f"no bypass after Redis stopped: {set(results[seen:])}"
            time.sleep(0.01)
    finally:
        stop.set()  # a failed wait above must not leave the load running into the next tests
        for w in workers:
            w.join(timeout=60)
    assert statuses and set(statuses) == {200}, f"{len(statuses)} requests: {sorted(set(statuses))}"
    said = [
        line
        for line in gw.logs().splitlines()
        if line.startswith("Redis at REDIS_URL is unreachable for the response cache")
    ]
    assert len(said) == 1, said  # one line for the outage, not one per request (the plain-format handler's)

    own_redis.start()
    _wait_for_degraded(gw, 0)
    prompt = unique("after recovery")
    c = client(gw)
    assert ask(c, "cached-chat", prompt).headers["x-switchboard-cache"] == "miss"
    assert ask(c, "cached-chat", prompt).headers["x-switchboard-cache"] == "hit"


def test_a_hung_redis_costs_one_bounded_lookup_then_bypass_and_its_entries_are_back_after(
    on_own_redis, mock_upstream, own_redis
):
    gw = on_own_redis
    c = client(gw)
    kept = unique("kept through the pause")
    assert ask(c, "cached-chat", kept).headers["x-switchboard-cache"] == "miss"
    assert ask(c, "cached-chat", kept).headers["x-switchboard-cache"] == "hit"  # this process's write buffer or Redis
    own_redis.process.send_signal(signal.SIGSTOP)  # answers nothing, refuses nothing: only timeouts notice
    try:
        before = mock_upstream.count("cache-x-chat")
        answers = [ask(c, "cached-chat", unique(f"paused {i}")) for i in range(10)]
        assert [a.http_response.status_code for a in answers] == [200] * 10
        assert [a.headers["x-switchboard-cache"] for a in answers[1:]] == ["bypass"] * 9
        assert mock_upstream.count("cache-x-chat") == before + 10
        _wait_for_degraded(gw, 1)
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    _wait_for_degraded(gw, 0)
    assert ask(c, "cached-chat", kept).headers["x-switchboard-cache"] == "hit"  # the same store, shared again
