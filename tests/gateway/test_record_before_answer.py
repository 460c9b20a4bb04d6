"""A request's usage record is queued (so journaled) before the last byte of its answer is
handed to the server (docs/usage-records.md): a process killed with SIGKILL right after
answering has the record in its journal, whatever the scheduler does between the two.

Queued after the answer instead, a kill landing in between lost the record of a request the
client had seen answered (tests/e2e/test_usage_e2e.py's kill -9 test timed out waiting for its
last record, now and then, on a loaded machine). Here the server's `send` looks, as the last
byte goes out, at what was recorded: no clock, no race. (A committed stream is journaled at its
commit instead: tests/runtime/test_usage_streams.py.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application


@pytest.fixture
async def records(upstream: str, monkeypatch) -> AsyncIterator[list[dict]]:
    rows: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: rows.append(row))
    previous = live.current()
    live.swap(build_snapshot(document(upstream), key_rows(), {}, version=1))
    yield rows
    live.swap(previous)
    await current().transport.aclose()


def scope(path: str, method: str = "POST") -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"authorization", f"Bearer {API_KEY}".encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def serve(path: str, body: dict, records: list[dict]) -> tuple[int, list[int]]:
    """Serve one request; its status and, at each last body message, how many records were queued."""
    inbox = [{"type": "http.request", "body": orjson.dumps(body), "more_body": False}]
    status = 0
    at_last_byte: list[int] = []
    hang_up = asyncio.Event()

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await hang_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            at_last_byte.append(len(records))

    await asyncio.wait_for(gateway_application(scope(path), receive, send), 10)
    return status, at_last_byte


CHAT = {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/v1/chat/completions", CHAT, 200),
        ("/v1/embeddings", {"model": "embed-a", "input": "hi"}, 200),
        ("/v1/chat/completions", {**CHAT, "model": "no-such-model"}, 404),
        ("/v1/chat/completions", {**CHAT, "model": "no-such-model", "stream": True}, 404),
    ],
    ids=["answer", "embeddings", "error", "stream-refused"],
)
async def test_the_usage_record_is_queued_before_the_answer_s_last_byte(records, path, body, expected) -> None:
    status, at_last_byte = await serve(path, body, records)
    assert status == expected
    assert at_last_byte == [1], "the answer's last byte went out before its usage record was queued"
    assert len(records) == 1  # and only once
    if status == 200:
        assert records[0]["prompt_tokens"]  # the upstream's usage is in it: the whole record, not a draft
