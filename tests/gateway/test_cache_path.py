"""The response cache and coalescing on the in-process request path (docs/cache.md).

The real mock upstream counts the calls it gets; the store is a fresh in-memory LRU
per test, whatever REDIS_URL says (the Redis store has its own tests).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import uuid

import httpx
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.cache.response_cache import Coalescer, MemoryCache, RedisCache
from routing.runtime.process import current
from tests.gateway.conftest import document, key_rows

OTHER_KEY = "sb-other-org-key-987654321"


@pytest.fixture
def cached(gateway, upstream, monkeypatch):
    """chat-b and embed-a cache for 60 s; a second org `globex` exists; usage records captured."""
    records: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: records.append(row))
    proc = current()
    monkeypatch.setattr(proc, "cache", MemoryCache())
    monkeypatch.setattr(proc, "coalescer", Coalescer())
    doc = copy.deepcopy(document(upstream))
    for m in doc["models"]:
        if m["id"] in ("chat-b", "embed-a"):
            m["cache_ttl_s"] = 60
    doc["orgs"].append({"name": "globex", "agents": [{"name": "bot"}]})
    doc["aliases"]["chat-b-alias"] = "chat-b"
    rows = key_rows() + [
        {
            "key_hash": hashlib.sha256(OTHER_KEY.encode()).hexdigest(),
            "prefix": OTHER_KEY[:10],
            "org": "globex",
            "agent": "bot",
            "expires_at": None,
        }
    ]
    live.swap(build_snapshot(doc, rows, {}, version=3))
    return records


async def calls(upstream: str, model: str) -> int:
    async with httpx.AsyncClient(base_url=upstream) as client:
        return (await client.get("/_control/calls", params={"model": model})).json()["count"]


async def script(upstream: str, model: str, steps: list[dict]) -> None:
    async with httpx.AsyncClient(base_url=upstream) as client:
        (await client.post("/_control/script", json={"model": model, "steps": steps})).raise_for_status()


def chat(prompt: str, model: str = "chat-b", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}


async def test_a_second_identical_request_is_a_hit_without_an_upstream_call(gateway, upstream, cached):
    prompt = f"hello {uuid.uuid4().hex}"
    before = await calls(upstream, "ip-chat-b")
    first = await gateway.post("/v1/chat/completions", json=chat(prompt, temperature=0))
    assert first.status_code == 200 and first.headers["x-switchboard-cache"] == "miss"
    # Same request, fields in another order, the float written as 0.0: one canonical request.
    second = await gateway.post(
        "/v1/chat/completions",
        json={"temperature": 0.0, "messages": [{"content": prompt, "role": "user"}], "model": "chat-b"},
    )
    assert second.status_code == 200, second.text
    assert second.headers["x-switchboard-cache"] == "hit"
    assert second.content == first.content
    assert second.headers["x-switchboard-model-used"] == "chat-b"
    assert second.headers["x-switchboard-attempts"] == "0"
    assert second.headers["x-request-id"] != first.headers["x-request-id"]
    assert await calls(upstream, "ip-chat-b") == before + 1
    assert [(r["cached"], r["cost"], r["model_used"], r["attempts"]) for r in cached] == [
        (False, None, "chat-b", 1),
        (True, 0, "chat-b", 0),
    ]
    assert cached[1]["prompt_tokens"] == cached[0]["prompt_tokens"]


async def test_another_org_never_reads_the_first_orgs_answer(gateway, upstream, cached):
    prompt = f"org-scoped {uuid.uuid4().hex}"
    assert (await gateway.post("/v1/chat/completions", json=chat(prompt))).headers["x-switchboard-cache"] == "miss"
    other = await gateway.post(
        "/v1/chat/completions", json=chat(prompt), headers={"Authorization": f"Bearer {OTHER_KEY}"}
    )
    assert other.status_code == 200 and other.headers["x-switchboard-cache"] == "miss"


async def test_a_parameter_that_changes_the_answer_is_another_entry(gateway, upstream, cached):
    prompt = f"params {uuid.uuid4().hex}"
    await gateway.post("/v1/chat/completions", json=chat(prompt, temperature=0))
    warmer = await gateway.post("/v1/chat/completions", json=chat(prompt, temperature=0.9))
    assert warmer.headers["x-switchboard-cache"] == "miss"
    # The end-user id changes nothing about the answer: same entry.
    tagged = await gateway.post("/v1/chat/completions", json=chat(prompt, temperature=0, user="u-42"))
    assert tagged.headers["x-switchboard-cache"] == "hit"


async def test_no_cache_calls_again_and_stores_no_store_neither_reads_nor_stores(gateway, upstream, cached):
    prompt = f"directives {uuid.uuid4().hex}"
    before = await calls(upstream, "ip-chat-b")
    await gateway.post("/v1/chat/completions", json=chat(prompt))
    fresh = await gateway.post("/v1/chat/completions", json=chat(prompt), headers={"Cache-Control": "no-cache"})
    assert fresh.headers["x-switchboard-cache"] == "bypass"
    assert await calls(upstream, "ip-chat-b") == before + 2
    other = f"never stored {uuid.uuid4().hex}"
    kept_out = await gateway.post("/v1/chat/completions", json=chat(other), headers={"Cache-Control": "no-store"})
    assert kept_out.headers["x-switchboard-cache"] == "bypass"
    assert (await gateway.post("/v1/chat/completions", json=chat(other))).headers["x-switchboard-cache"] == "miss"


async def test_streams_bypass_and_models_without_a_cache_get_no_header(gateway, upstream, cached):
    prompt = f"stream {uuid.uuid4().hex}"
    streamed = await gateway.post("/v1/chat/completions", json=chat(prompt, stream=True))
    assert streamed.status_code == 200 and streamed.headers["x-switchboard-cache"] == "bypass"
    assert (await gateway.post("/v1/chat/completions", json=chat(prompt))).headers["x-switchboard-cache"] == "miss"
    plain = await gateway.post("/v1/chat/completions", json=chat(prompt, model="chat-a"))
    assert plain.status_code == 200 and "x-switchboard-cache" not in plain.headers


async def test_errors_are_never_stored(gateway, upstream, cached):
    prompt = f"fails once {uuid.uuid4().hex}"
    await script(upstream, "ip-chat-b", [{"status": 400, "body": '{"error": {"message": "bad"}}'}])
    failed = await gateway.post("/v1/chat/completions", json=chat(prompt))
    assert failed.status_code == 400 and failed.headers["x-switchboard-cache"] == "miss"
    ok = await gateway.post("/v1/chat/completions", json=chat(prompt))
    assert ok.status_code == 200 and ok.headers["x-switchboard-cache"] == "miss"


async def test_embeddings_are_cached_too(gateway, upstream, cached):
    body = {"model": "embed-a", "input": [f"embed {uuid.uuid4().hex}"]}
    before = await calls(upstream, "ip-embed")
    assert (await gateway.post("/v1/embeddings", json=body)).headers["x-switchboard-cache"] == "miss"
    again = await gateway.post("/v1/embeddings", json=body)
    assert again.status_code == 200 and again.headers["x-switchboard-cache"] == "hit"
    assert await calls(upstream, "ip-embed") == before + 1


async def test_ten_identical_requests_in_flight_make_one_upstream_call(gateway, upstream, cached):
    prompt = f"together {uuid.uuid4().hex}"
    await script(upstream, "ip-chat-b", [{"delay_ms": 300}])
    before = await calls(upstream, "ip-chat-b")
    answers = await asyncio.gather(*(gateway.post("/v1/chat/completions", json=chat(prompt)) for _ in range(10)))
    assert [a.status_code for a in answers] == [200] * 10
    assert await calls(upstream, "ip-chat-b") == before + 1
    assert sorted(a.headers["x-switchboard-cache"] for a in answers) == ["hit"] * 9 + ["miss"]
    assert len({a.content for a in answers}) == 1
    assert sorted(r["cached"] for r in cached) == [False] + [True] * 9
    assert len(current().coalescer) == 0


class RepliesOutOfOrder(RedisCache):
    """Two lookups on two connections: Redis runs the first one first, this process reads the second
    one's reply first. Redis gave the first lookup the claim, but the process learns of it only after
    the second lookup came back ("another holds it") and its request started to lead."""

    def __init__(self, url: str) -> None:
        super().__init__(url, timeout_s=1.0)
        self.lookups = 0
        self.first_ran, self.second_back = asyncio.Event(), asyncio.Event()

    def _run(self, *command):
        if command[0] != "EVAL":
            return super()._run(*command)
        self.lookups += 1
        return asyncio.ensure_future(self._lookup(self.lookups, super()._run(*command)))

    async def _lookup(self, n: int, reply):
        if n == 1:
            found = await reply  # Redis ran it...
            self.first_ran.set()
            await self.second_back.wait()  # ...its reply is read after the second's
            return found
        if n == 2:
            await self.first_ran.wait()
            try:
                return await reply
            finally:
                self.second_back.set()
        return await reply


async def test_two_lookups_whose_replies_cross_share_one_call_and_never_wait_on_their_own_claim(
    redis_url, gateway, upstream, cached, monkeypatch
):
    """CI caught it: the second request waited in Redis for the first's claim, the first followed the
    second in memory, and both hung until their deadline."""
    store = RepliesOutOfOrder(redis_url)
    monkeypatch.setattr(current(), "cache", store)
    prompt = f"crossed {uuid.uuid4().hex}"
    before = await calls(upstream, "ip-chat-b")
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(gateway.post("/v1/chat/completions", json=chat(prompt)) for _ in range(2))), 10
        )
        assert [a.status_code for a in answers] == [200, 200]
        assert sorted(a.headers["x-switchboard-cache"] for a in answers) == ["hit", "miss"]
        assert await calls(upstream, "ip-chat-b") == before + 1
        await store.drain()
        third = await gateway.post("/v1/chat/completions", json=chat(prompt))
        assert third.headers["x-switchboard-cache"] == "hit"
    finally:
        await store.drain()
        await store.aclose()


async def test_a_failed_leader_gives_its_error_to_the_waiters_and_stores_nothing(gateway, upstream, cached):
    prompt = f"fail together {uuid.uuid4().hex}"
    await script(upstream, "ip-chat-b", [{"delay_ms": 300, "status": 400, "body": '{"error": {"message": "no"}}'}])
    before = await calls(upstream, "ip-chat-b")
    answers = await asyncio.gather(*(gateway.post("/v1/chat/completions", json=chat(prompt)) for _ in range(5)))
    assert [a.status_code for a in answers] == [400] * 5
    assert await calls(upstream, "ip-chat-b") == before + 1
    assert [a.headers["x-switchboard-cache"] for a in answers] == ["miss"] * 5  # an error is never a hit
    assert not [r for r in cached if r["cached"]]
    retry = await gateway.post("/v1/chat/completions", json=chat(prompt))
    assert retry.status_code == 200 and retry.headers["x-switchboard-cache"] == "miss"


async def test_a_hit_still_counts_against_rpm_but_not_tpm(gateway, upstream, cached, monkeypatch):
    current().limiter.forget()
    doc = copy.deepcopy(document(upstream))
    for m in doc["models"]:
        if m["id"] == "chat-b":
            m["cache_ttl_s"] = 60
    doc["orgs"][0]["agents"][0]["limits"] = {"rpm": 2, "tpm": 100000}
    live.swap(build_snapshot(doc, key_rows(), {}, version=4))
    prompt = f"limited {uuid.uuid4().hex}"
    first = await gateway.post("/v1/chat/completions", json=chat(prompt, max_tokens=10))
    hit = await gateway.post("/v1/chat/completions", json=chat(prompt, max_tokens=10))
    assert hit.headers["x-switchboard-cache"] == "hit"
    refused = await gateway.post("/v1/chat/completions", json=chat(prompt, max_tokens=10))
    assert refused.status_code == 429
    assert first.status_code == 200 and refused.json()["error"]["code"] == "rate_limited"
    # Only the first request's real usage (12 + 7 tokens from the mock) was charged: the hit's reservation came back.
    assert int(refused.headers["x-ratelimit-remaining-tokens"]) >= 100000 - 19
    current().limiter.forget()


async def test_a_cached_answer_names_the_model_each_client_asked_for(gateway, upstream, cached, monkeypatch):
    body = {"messages": [{"role": "user", "content": f"alias {uuid.uuid4()}"}]}
    first = await gateway.post("/v1/chat/completions", json={**body, "model": "chat-b"})
    second = await gateway.post("/v1/chat/completions", json={**body, "model": "chat-b-alias"})
    assert second.headers["x-switchboard-cache"] == "hit"  # an alias shares its target's entries ...
    assert (first.json()["model"], second.json()["model"]) == ("chat-b", "chat-b-alias")  # ... named as asked
    assert await calls(upstream, "ip-chat-b") == 1
