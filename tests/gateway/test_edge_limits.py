"""The server edge's pieces on their own (docs/security.md#server-edge); the servers are
tested end to end in tests/e2e/test_server_edge.py."""

from __future__ import annotations

import asyncio
import dataclasses
import resource

import orjson

from gateway_project import edge


def test_the_connection_cap_stays_below_the_file_limit_with_descriptors_reserved(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (20_000, 20_000))
    assert edge.connection_cap(0, 256) == 19_744  # auto: the file limit less the reserve
    assert edge.connection_cap(500, 256) == 500  # configured below it
    assert edge.connection_cap(50_000, 256) == 19_744  # configured above it: never past the limit


def _run(app, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[list[dict], list[int]]:
    """Drive `app` with a POST whose body arrives as `chunks`; (messages sent, sizes the app read)."""
    sent: list[dict] = []
    read: list[int] = []
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    async def inner(scope, receive, send) -> None:  # a handler that reads the whole body, then answers
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            read.append(len(message["body"]))
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    scope = {"type": "http", "method": "POST", "path": "/admin/login/", "headers": headers}
    asyncio.run(app(inner)(scope, receive, send))
    return sent, read


def test_a_page_body_over_the_limit_by_length_is_refused_before_a_byte_is_read(monkeypatch):
    smaller = dataclasses.replace(edge.limits(), page_body_bytes=100)
    monkeypatch.setattr(edge, "limits", lambda: smaller)
    sent, read = _run(edge.limit_page_bodies, [(b"content-length", b"101")], [b"x" * 101])
    assert read == [] and sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "request_too_large"


def test_a_chunked_page_body_is_refused_as_it_passes_the_limit_and_the_handler_sees_the_client_gone(monkeypatch):
    smaller = dataclasses.replace(edge.limits(), page_body_bytes=100)
    monkeypatch.setattr(edge, "limits", lambda: smaller)
    sent, read = _run(edge.limit_page_bodies, [], [b"x" * 60, b"x" * 60, b"x" * 60])
    assert read == [60]  # the second chunk passed the limit: never handed to the handler
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]  # the handler's 200 dropped
    sent, read = _run(edge.limit_page_bodies, [], [b"x" * 50, b"x" * 50])
    assert read == [50, 50] and sent[0]["status"] == 200  # at the limit: served


def test_a_413_takes_anthropics_error_shape_where_the_endpoint_table_says_the_path_speaks_messages():
    """The row's protocol decides, as it does for the gateway's own errors: both Messages rows answer
    in Anthropic's shape; a path the table does not serve, even one starting like them, in the catalogue's."""
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        body = orjson.loads(edge.too_large_body(100, path))
        assert body["type"] == "error" and body["error"]["type"] == "request_too_large", path
    for path in ("/v1/chat/completions", "/v1/messages_batches", "/v1/messages/unknown", ""):
        body = orjson.loads(edge.too_large_body(100, path))
        assert body["error"]["code"] == "request_too_large", path
