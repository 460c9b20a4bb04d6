"""A translated stream keeps its upstream connection pooled (docs/performance.md#drain-after).

Anthropic's stream ends at `message_stop`, and the gateway's answer with it; the upstream's HTTP
transfer often ends a little later (here: a ping event 20 ms after, then the chunked end). The
gateway hands the response to the process's drains once the client has its last byte, so the
next call reuses the connection instead of opening a new one; the client never waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from aiohttp import web

from bench.stream_profile import scope as asgi_scope
from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.background import Drains
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application

EVENTS = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "up-claude",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        },
    ),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
    ("message_stop", {"type": "message_stop"}),
]
STREAM = b"".join(f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n" for name, data in EVENTS)
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


class Upstream:
    """A loopback Anthropic upstream whose transfer goes on `trailing_s` after message_stop."""

    def __init__(self, trailing_s: float) -> None:
        self.trailing_s = trailing_s
        self.peers: list[tuple] = []  # one per request: the client's address and port
        self.ended = 0  # transfers written to their end (a drain that closed early cuts the write)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.peers.append(request.transport.get_extra_info("peername"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(STREAM)
        await asyncio.sleep(self.trailing_s)
        await response.write(PING)
        await response.write_eof()
        self.ended += 1
        return response


async def serve(state: Upstream) -> tuple[web.AppRunner, int]:
    """`state`'s Anthropic Messages route on a loopback port of the running loop: (runner, port)."""
    app = web.Application()
    app.router.add_post("/v1/messages", state.messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # noqa: SLF001


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream(trailing_s=0.02)
    runner, port = await serve(state)
    document = {
        "resilience": {"max_retries": 0},
        "providers": [{"name": "claude", "dialect": "anthropic", "base_url": f"http://127.0.0.1:{port}/v1"}],
        "models": [
            {"id": "claude", "provider": "claude", "upstream_model": "up-claude", "capabilities": ["chat", "streaming"]}
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }
    previous = live.current()
    live.swap(build_snapshot(document, key_rows(), {}, version=1))
    yield state
    live.swap(previous)
    await current().drains.aclose()
    await current().transport.aclose()
    await runner.cleanup()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway_application),
        base_url="http://gateway",
        headers={"Authorization": f"Bearer {API_KEY}"},
    )


CALLS = {
    "chat": (
        "/v1/chat/completions",
        {"model": "claude", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        b"data: [DONE]",
    ),
    "messages": (
        "/v1/messages",
        {"model": "claude", "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]},
        b"message_stop",
    ),
}


async def stream_once(http: httpx.AsyncClient, endpoint: str) -> tuple[bytes, float]:
    """One streamed call; its body and how long the gateway took to end it."""
    path, body, last = CALLS[endpoint]
    started = time.perf_counter()
    answer = await http.post(path, json=body)
    took = time.perf_counter() - started
    assert answer.status_code == 200, answer.text
    assert last in answer.content
    return answer.content, took


async def drained(drains: Drains) -> None:
    for _ in range(200):
        if not drains.pending:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("a drain is still pending after 2 s")


@pytest.mark.parametrize("endpoint", ["chat", "messages"])
async def test_a_translated_stream_s_connection_is_reused_by_the_next_call(upstream, endpoint) -> None:
    async with client() as http:
        for _ in range(3):
            await stream_once(http, endpoint)
            await drained(current().drains)
    assert len(set(upstream.peers)) == 1, "each stream after the first paid a new upstream connection"
    assert len(upstream.peers) == 3 and upstream.ended == 3  # every transfer written to its end


async def test_beyond_its_limit_a_finished_stream_s_connection_is_closed_at_once(upstream) -> None:
    drains = current().drains
    limit = drains.limit
    drains.limit = 0
    try:
        async with client() as http:
            for _ in range(2):
                await stream_once(http, "chat")
                assert not drains.pending
    finally:
        drains.limit = limit
    assert len(set(upstream.peers)) == 2  # not drained: closed, and the next call connected anew


async def test_the_client_never_waits_and_shutdown_closes_the_connections_still_draining(upstream) -> None:
    upstream.trailing_s = 1.0  # the transfer does not end before the shutdown
    drains = current().drains
    wait_s = drains.wait_s
    drains.wait_s = 30.0
    try:
        async with client() as http:
            _, took = await stream_once(http, "chat")
        assert upstream.ended == 0 and took < 1.0  # answered while the upstream's transfer goes on
        assert drains.pending == 1
        await asyncio.wait_for(drains.aclose(), 2.0)
        assert not drains.pending
    finally:
        drains.wait_s = wait_s
    async with client() as http:
        upstream.trailing_s = 0.0
        await stream_once(http, "chat")
    assert len(set(upstream.peers)) == 2  # the cancelled drain closed its connection


async def test_a_client_that_leaves_mid_answer_gets_its_connection_closed_at_once(upstream) -> None:
    """The client's connection fails on the answer's last message: nothing to finish, nothing drained."""
    upstream.trailing_s = 1.0
    path, body, _ = CALLS["chat"]
    payload = orjson.dumps(body)
    sent: list[dict] = []
    read: list[bool] = []

    async def receive() -> dict:
        if not read:
            read.append(True)
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            raise OSError("the client went away")

    scope = asgi_scope(path, API_KEY)
    try:
        await gateway_application(scope, receive, send)
    except OSError:
        pass
    assert sent[0]["status"] == 200 and not current().drains.pending
    upstream.trailing_s = 0.0
    async with client() as http:
        await stream_once(http, "chat")
    assert len(set(upstream.peers)) == 2  # the first connection was closed, not kept
