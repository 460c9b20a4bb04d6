"""Rate limits on the in-process request path: refusal, usage record, settlement (docs/limits.md)."""

from __future__ import annotations

import copy

import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import document, key_rows


def chat(model: str = "chat-b", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def limited(gateway, upstream, monkeypatch):
    """Swap in a snapshot whose agent and org have limits; fresh buckets; usage records captured."""
    records: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: records.append(row))
    current().limiter.forget()

    def apply(agent_limits=None, org_limits=None) -> list[dict]:
        doc = copy.deepcopy(document(upstream))
        doc["providers"].append({"name": "dead", "base_url": "http://127.0.0.1:9/v1"})
        doc["models"].append({"id": "dead-chat", "provider": "dead", "upstream_model": "x", "capabilities": ["chat"]})
        org = doc["orgs"][0]
        if org_limits:
            org["limits"] = org_limits
        if agent_limits:
            org["agents"][0]["limits"] = agent_limits
        live.swap(build_snapshot(doc, key_rows(), {}, version=2))
        return records

    yield apply
    current().limiter.forget()


async def test_over_rpm_is_429_recorded_with_its_code_and_not_sent_upstream(gateway, limited):
    records = limited(agent_limits={"rpm": 2})
    assert [(await gateway.post("/v1/chat/completions", json=chat())).status_code for _ in range(2)] == [200, 200]
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["retry-after"]) == 30  # one request back every 30 s at 2 rpm
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.json()["error"]["message"] == (  # whose limit, which, and when (found by mutation testing)
        "Rate limit reached: the agent 'acme/bot' is over its limit of 2 requests per minute (rpm): "
        "retry in 30 s. Nothing was sent upstream."
    )
    assert "x-switchboard-attempts" not in refused.headers  # no chain was walked
    assert [(r["status"], r["error_code"], r["attempts"]) for r in records] == [
        (200, "", 1),
        (200, "", 1),
        (429, "rate_limited", 0),
    ]


async def test_an_upstream_failure_refunds_the_token_reservation(gateway, limited):
    limited(org_limits={"tpm": 3000})
    failed = await gateway.post("/v1/chat/completions", json=chat("dead-chat", max_tokens=1000))
    assert failed.status_code == 502
    # The error answer says where the caller stands after the refund: nothing was used.
    assert failed.headers["x-ratelimit-remaining-tokens"] == "3000"
    served = await gateway.post("/v1/chat/completions", json=chat(max_tokens=1000))
    assert 1900 < int(served.headers["x-ratelimit-remaining-tokens"]) < 2000  # only this one's reservation


async def test_a_stream_is_settled_with_its_real_usage_when_it_ends(gateway, limited):
    limited(agent_limits={"tpm": 5000})
    streamed = await gateway.post("/v1/chat/completions", json=chat(stream=True, max_tokens=2000))
    assert streamed.status_code == 200
    assert int(streamed.headers["x-ratelimit-remaining-tokens"]) < 3000  # 2000 + the prompt reserved
    after = await gateway.post("/v1/chat/completions", json=chat(max_tokens=10))
    # The stream was charged its real usage (tens of tokens), not its 2000-token reservation.
    assert int(after.headers["x-ratelimit-remaining-tokens"]) > 4800


async def test_an_unlimited_caller_gets_no_ratelimit_headers(gateway, limited):
    limited()
    answer = await gateway.post("/v1/chat/completions", json=chat())
    assert answer.status_code == 200
    assert not [h for h in answer.headers if h.startswith("x-ratelimit-")]


async def test_an_idempotent_replay_says_where_the_caller_stands_now(gateway, limited):
    limited(agent_limits={"rpm": 5})
    headers = {"Idempotency-Key": "limits-replay-1"}
    first = await gateway.post("/v1/chat/completions", json=chat(), headers=headers)
    replay = await gateway.post("/v1/chat/completions", json=chat(), headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert first.headers["x-ratelimit-remaining-requests"] == "4"
    assert replay.headers.get_list("x-ratelimit-remaining-requests") == ["3"]  # not the stored "4"


@pytest.mark.parametrize(
    ("status", "usage", "cache", "left"),
    [
        (200, (20, 30), None, 950),  # answered with usage: charged the real 50 tokens
        (200, (20, None), None, 980),  # a prompt count alone still counts
        (200, (None, None), None, 700),  # answered without usage: the 300 reserved stand
        (502, (20, 30), None, 1000),  # no answer: refunded
        (200, (20, 30), "hit", 1000),  # from the response cache: no upstream call, no tokens
        (200, (20, 30), "coalesced", 1000),  # answered by another request's call
    ],
    ids=["usage", "prompt-only", "no-usage", "error", "cache-hit", "coalesced"],
)
def test_the_token_reservation_is_settled_by_what_the_answer_was(status, usage, cache, left):
    """Found by mutation testing (limiting.settle): each rule of docs/limits.md#tokens, exactly."""
    from routing.core.limiter import Limiter
    from routing.gateway import limiting
    from routing.runtime.accounting import Context

    limiter = Limiter(lambda: 1000.0)
    ticket = limiter.admit("acme", None, "bot", (None, 1000), lambda: 300)
    ctx = Context("r", 0.0, "chat")
    ctx.status, (ctx.prompt_tokens, ctx.completion_tokens), ctx.cache = status, usage, cache
    limiting.settle(ticket, ctx)
    assert dict(ticket.headers())[b"x-ratelimit-remaining-tokens"] == b"%d" % left


async def test_an_org_s_limit_is_named_as_the_org_s_in_the_429(gateway, limited):
    """Found by mutation testing (limiting._whose / _refuse): the scope named is the one refused."""
    limited(agent_limits={"rpm": 100}, org_limits={"rpm": 1})
    assert (await gateway.post("/v1/chat/completions", json=chat())).status_code == 200
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert refused.status_code == 429
    assert "the org 'acme' is over its limit of 1 requests per minute (rpm)" in refused.json()["error"]["message"]
