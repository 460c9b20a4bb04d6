"""Prompt-cache affinity across real gateway processes and a restart (docs/deployments.md#affinity): two
servers on one database and one Redis, conversations alternating between them, then the first server
replaced by a new one; every conversation stays on the deployment it was pinned to, and the cached-input
ratio the mock's deployments report (each has a prompt cache of its own) is that of one deployment alone."""

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
  - id: one-chat
    capabilities: [chat]
    provider: d1
    upstream_model: aff-{tag}-one
orgs:
  - name: acme
    agents:
      - name: bot
"""

SESSIONS = 12


MODELS = ("aff-chat", "one-chat")  # three deployments with affinity; the single-deployment baseline


def _turn(gw: Gateway, model: str, history: list[dict]) -> tuple[str, dict, dict]:
    r = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": model, "messages": history},
        headers={"Authorization": f"Bearer {gw.api_key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.headers["x-switchboard-provider-used"], r.json()["choices"][0]["message"], r.json()["usage"]


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
    for upstream in ("d1", "d2", "d3", "one"):  # each deployment caches the prefixes it has seen, apart
        mock_upstream.client.post("/_control/script", json={"model": f"aff-{tag}-{upstream}", "prompt_cache": True})
    shared = {"REDIS_URL": redis_url, "SWITCHBOARD_CLUSTER": f"aff-{tag}"}  # this test's pins only
    a = make_gateway(CONFIG.format(mock=mock_upstream.url, tag=tag), env=shared)
    _wait(lambda: _loaded(a, 0), "the first server has connected")
    histories = {
        (m, s): [{"role": "system", "content": f"Assistant {s}. " * 40}, {"role": "user", "content": f"start {s}"}]
        for m in MODELS
        for s in range(SESSIONS)
    }
    served: dict[int, set[str]] = {s: set() for s in range(SESSIONS)}
    tokens = {m: [0, 0] for m in MODELS}  # prompt tokens, of which cached, as the deployments reported

    def turn(gw: Gateway, s: int) -> None:
        for m in MODELS:  # the same conversation shape on both models, through the same process
            provider, answer, usage = _turn(gw, m, histories[m, s])
            if m == "aff-chat":
                served[s].add(provider)
            tokens[m][0] += usage["prompt_tokens"]
            tokens[m][1] += usage["prompt_tokens_details"]["cached_tokens"]
            histories[m, s] += [answer, {"role": "user", "content": f"more {len(histories[m, s])}"}]

    for s in range(SESSIONS):
        turn(a, s)
    keys = redis.Redis.from_url(redis_url)
    pins = f"switchboard:affinity:aff-{tag}:*"  # the conversations of aff-chat (one-chat has no pins)
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
    pinned, baseline = (cached / prompt for prompt, cached in (tokens[m] for m in MODELS))
    assert baseline > 0.5 and pinned >= 0.95 * baseline, tokens  # cluster-wide, across the restart
    c.stop()
    b.stop()
