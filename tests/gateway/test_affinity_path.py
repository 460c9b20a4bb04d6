"""Prompt-cache affinity on the request path (docs/deployments.md#affinity): multi-turn conversations over
three deployments of a mock whose deployments each keep a prompt cache of their own."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import REGISTRY

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.core.breaker import State
from routing.runtime.process import current
from tests.core.breakers import breaker_settings
from tests.inprocess import gateway_application

API_KEY = "sb-affinity-key-0123456789"
OTHER_KEY = "sb-affinity-other-0123456789"  # an agent of another org
DEPLOYMENTS = ("d1", "d2", "d3")


def _deployments(prefix: str) -> list[dict]:
    return [{"provider": p, "upstream_model": f"{prefix}-{p}"} for p in DEPLOYMENTS]


def _document(upstream: str) -> dict:
    chat = {"capabilities": ["chat"], "context_window": 1_000_000}
    return {
        "resilience": {"max_retries": 1, "backoff_base_ms": 1, "backoff_max_ms": 2, "breaker_failure_threshold": 2},
        "providers": [{"name": p, "dialect": "openai", "base_url": f"{upstream}/v1"} for p in DEPLOYMENTS],
        "models": [
            {"id": "pinned", **chat, "deployments": _deployments("pin"), "affinity": {"ttl_s": 300}},
            {"id": "spread", **chat, "deployments": _deployments("rr")},
            {"id": "single", **chat, "provider": "d1", "upstream_model": "one"},
            {"id": "opens", **chat, "deployments": _deployments("open"), "affinity": {"ttl_s": 300}},
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}, {"name": "umbrella", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[tuple[str, object]]:
    from tools.mock.upstream import start_mock, state_of

    runner, port = await start_mock(0)
    yield f"http://127.0.0.1:{port}", state_of(runner)
    await runner.cleanup()


@pytest.fixture
async def client(mock: tuple[str, object]) -> AsyncIterator[httpx.AsyncClient]:
    upstream, _ = mock
    rows = [
        {
            "key_hash": hashlib.sha256(key.encode()).hexdigest(),
            "prefix": key[:10],
            "org": org,
            "agent": "bot",
            "expires_at": None,
        }
        for key, org in ((API_KEY, "acme"), (OTHER_KEY, "umbrella"))
    ]
    previous = live.current()
    live.swap(build_snapshot(_document(upstream), rows, {}, version=1))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway_application),
        base_url="http://gateway",
        headers={"Authorization": f"Bearer {API_KEY}"},
    ) as c:
        async with httpx.AsyncClient(base_url=upstream) as control:
            for name in ("one", *(f"{m}-{p}" for m in ("pin", "rr", "open") for p in DEPLOYMENTS)):
                (await control.post("/_control/script", json={"model": name, "prompt_cache": True})).raise_for_status()
        yield c
    live.swap(previous)
    await current().transport.aclose()


SESSIONS, TURNS = 50, 20  # recorded agent sessions: a growing prefix over 20 turns, 50 of them


async def _conversations(client: httpx.AsyncClient, model: str, sessions: int, turns: int) -> tuple[float, Counter]:
    """Replay `sessions` conversations of `turns` turns (a growing prefix); the cached-input ratio and, per
    session, how many deployments served it."""
    cached = prompt = 0
    spread: Counter = Counter()
    for s in range(sessions):
        messages = [
            {"role": "system", "content": f"You are assistant {s} of {model}. " * 20},
            {"role": "user", "content": f"Session {s}: let us begin."},
        ]
        used = set()
        for t in range(turns):
            r = await client.post("/v1/chat/completions", json={"model": model, "messages": messages})
            assert r.status_code == 200, r.text
            usage = r.json()["usage"]
            prompt += usage["prompt_tokens"]
            cached += usage["prompt_tokens_details"]["cached_tokens"]
            used.add(r.headers["x-switchboard-provider-used"])
            messages = [*messages, r.json()["choices"][0]["message"], {"role": "user", "content": f"turn {t}"}]
        spread[len(used)] += 1
    return cached / prompt, spread


async def test_a_conversation_stays_on_one_deployment_and_keeps_the_single_deployment_cache_ratio(client) -> None:
    baseline, _ = await _conversations(client, "single", SESSIONS, TURNS)
    pinned, spread = await _conversations(client, "pinned", SESSIONS, TURNS)
    spread_ratio, _ = await _conversations(client, "spread", SESSIONS, TURNS)
    assert spread == Counter({1: SESSIONS})  # every conversation served by one deployment, every turn
    assert pinned >= 0.95 * baseline
    # without affinity the turns scatter: a deployment has seen only some earlier turns, so the tokens billed at
    # the full input price (the uncached part) are more than twice those of pinned conversations
    assert 1 - spread_ratio > 2 * (1 - pinned)
    total = sum(
        REGISTRY.get_sample_value(
            "switchboard_input_tokens_total", {"model": "pinned", "provider": p, "kind": "cached"}
        )
        or 0.0
        for p in DEPLOYMENTS
    )
    assert total > 0  # the cached-input ratio's numerator, per deployment


async def test_a_pinned_deployment_whose_breaker_opens_gets_no_more_requests(client, mock) -> None:
    _, state = mock
    body = {"model": "opens", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"X-Switchboard-Session": "conv-open"}
    first = await client.post("/v1/chat/completions", json=body, headers=headers)
    pinned = first.headers["x-switchboard-provider-used"]
    assert {
        (await client.post("/v1/chat/completions", json=body, headers=headers)).headers["x-switchboard-provider-used"]
        for _ in range(5)
    } == {pinned}
    breakers = current().breakers
    key = (pinned, "opens")
    for _ in range(2):  # the link fails as other requests saw it: its breaker opens
        with breaker_settings(breakers, 2, 60.0):
            breakers.record_failure(key, False)
    assert breakers.state(key) is State.OPEN
    calls_before = state.model(f"open-{pinned}").count
    served = Counter()
    for _ in range(10):
        r = await client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200
        served[r.headers["x-switchboard-provider-used"]] += 1
    assert state.model(f"open-{pinned}").count == calls_before  # 0 requests to the open deployment
    assert pinned not in served and len(served) == 1  # re-pinned to one other deployment, and it stays


async def test_the_same_session_in_two_orgs_is_two_conversations(client) -> None:
    body = {"model": "pinned", "messages": [{"role": "user", "content": "hello"}]}
    mine, theirs = set(), set()
    for i in range(12):  # each org's conversation "shared-name" stays where it was pinned, whatever the other does
        headers = {"X-Switchboard-Session": "shared-name"}
        if i % 2:
            headers["Authorization"] = f"Bearer {OTHER_KEY}"
        r = await client.post("/v1/chat/completions", json=body, headers=headers)
        (theirs if i % 2 else mine).add(r.headers["x-switchboard-provider-used"])
    assert len(mine) == 1 and len(theirs) == 1
    pins = current().picker.pins
    assert pins.get("pinned", "acme/s:shared-name", current().picker.clock()) is not None
    assert pins.get("pinned", "umbrella/s:shared-name", current().picker.clock()) is not None


async def test_the_conversations_of_a_deployment_whose_breaker_opens_are_all_re_pinned_and_it_gets_none(
    client, mock
) -> None:
    """Conversations keyed by their prompt (no header): every one pinned to the deployment whose breaker
    opens moves to one other deployment and stays there; the others keep theirs; each move is a re-pin."""
    _, state = mock

    def body(s: int, turn: int) -> dict:
        messages = [{"role": "system", "content": f"Agent {s}. " * 100}, {"role": "user", "content": f"task {s}"}]
        for t in range(turn):
            messages += [{"role": "assistant", "content": f"step {t}"}, {"role": "user", "content": f"go on {t}"}]
        return {"model": "opens", "messages": messages}

    async def serve(s: int, turn: int) -> str:
        r = await client.post("/v1/chat/completions", json=body(s, turn))
        assert r.status_code == 200, r.text
        return r.headers["x-switchboard-provider-used"]

    before = {s: {await serve(s, t) for t in range(3)} for s in range(12)}
    assert all(len(used) == 1 for used in before.values())
    pinned = {s: next(iter(used)) for s, used in before.items()}
    victim = Counter(pinned.values()).most_common(1)[0][0]
    moved = [s for s, d in pinned.items() if d == victim]
    for _ in range(2):
        current().breakers.record_failure((victim, "opens"), False, 2, 60.0)
    assert current().breakers.state((victim, "opens")) is State.OPEN
    calls = state.model(f"open-{victim}").count
    repins = REGISTRY.get_sample_value("switchboard_affinity_repins_total", {"model": "opens"}) or 0.0
    after = {s: {await serve(s, t) for t in range(3, 8)} for s in range(12)}
    assert state.model(f"open-{victim}").count == calls  # 0 requests to the open deployment
    assert all(len(used) == 1 for used in after.values())  # each conversation on one deployment again
    assert all(after[s] != {victim} for s in moved)  # re-pinned elsewhere
    assert all(after[s] == {pinned[s]} for s in pinned if s not in moved)  # the others untouched
    now = REGISTRY.get_sample_value("switchboard_affinity_repins_total", {"model": "opens"}) or 0.0
    assert now - repins == len(moved)
