"""Prompt-cache affinity across real gateway processes and a restart (docs/deployments.md#affinity): two
servers on one database and one Redis, conversations alternating between them, then the first server
replaced by a new one; every conversation stays on the deployment it was pinned to."""

from __future__ import annotations

import time
import uuid

import httpx
import redis

from tests.e2e.harness import SLACK_S, Gateway

CONFIG = """
resilience:
  max_retries: 0
providers:
  - {{name: d1, dialect: openai, base_url: "{mock}/v1"}}
  - {{name: d2, dialect: openai, base_url: "{mock}/v1"}}
  - {{name: d3, dialect: openai, base_url: "{mock}/v1"}}
models:
  - id: aff-chat
    capabilities: [chat]
    affinity: {{ttl_s: 600}}
    deployments:
      - {{provider: d1, upstream_model: aff-{tag}-d1}}
      - {{provider: d2, upstream_model: aff-{tag}-d2}}
      - {{provider: d3, upstream_model: aff-{tag}-d3}}
orgs:
  - name: acme
    agents:
      - name: bot
"""

SESSIONS = 12


def _turn(gw: Gateway, session: int, history: list[dict]) -> tuple[str, dict]:
    r = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": "aff-chat", "messages": history},
        headers={"Authorization": f"Bearer {gw.api_key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.headers["x-switchboard-provider-used"], r.json()["choices"][0]["message"]


def _wait(predicate, what: str, timeout: float = 5.0 + SLACK_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def _loaded(gw: Gateway, n: int) -> bool:
    return f"affinity pins: {n} loaded from Redis" in gw.logs()


def test_conversations_keep_their_deployment_across_two_processes_and_a_restart(
    make_gateway, mock_upstream, redis_url
) -> None:
    tag = uuid.uuid4().hex[:6]
    shared = {"REDIS_URL": redis_url, "SWITCHBOARD_CLUSTER": f"aff-{tag}"}  # this test's pins only
    a = make_gateway(CONFIG.format(mock=mock_upstream.url, tag=tag), env=shared)
    _wait(lambda: _loaded(a, 0), "the first server has connected")
    histories = {
        s: [{"role": "system", "content": f"Assistant {s}."}, {"role": "user", "content": f"start {s}"}]
        for s in range(SESSIONS)
    }
    served: dict[int, set[str]] = {s: set() for s in range(SESSIONS)}

    def turn(gw: Gateway, s: int) -> None:
        provider, answer = _turn(gw, s, histories[s])
        served[s].add(provider)
        histories[s] += [answer, {"role": "user", "content": f"more {len(histories[s])}"}]

    for s in range(SESSIONS):
        turn(a, s)
    keys = redis.Redis.from_url(redis_url)
    pins = f"switchboard:affinity:aff-{tag}:*"
    _wait(lambda: len(list(keys.scan_iter(pins))) == SESSIONS, "every pin is in Redis")
    b = a.second_process(shared)
    _wait(lambda: _loaded(b, SESSIONS), "the second server has loaded the pins")
    for _ in range(3):
        for s in range(SESSIONS):
            turn(b, s)
            turn(a, s)
    a.stop()  # a restart: a new process in its place knows the pins from Redis
    c = a.second_process(shared)
    _wait(lambda: _loaded(c, SESSIONS), "the restarted server has loaded the pins")
    for s in range(SESSIONS):
        turn(c, s)
    assert all(len(used) == 1 for used in served.values()), served
    assert len({next(iter(used)) for used in served.values()}) > 1  # the conversations themselves are spread
    c.stop()
    b.stop()
