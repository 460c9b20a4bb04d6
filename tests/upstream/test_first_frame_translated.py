"""A translated or relayed stream's first frame leaves before the rest of a burst is read (docs/performance.md#first-frame).

An upstream faster than the gateway hands over much of its stream in one read. The translators
read that read's events one at a time (`routing.core.sse.pop_frames` is a generator), and the
Responses and Messages pass-throughs yield their held events with the first content event as a
chunk of their own, so the client's first body message goes out after the first few events are
read, not all of them.
The bytes the client gets are unchanged (tests/upstream/test_translators.py checks them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from routing.core import sse
from routing.core.stream import UsageTap, open_stream
from routing.gateway.proxy import _relay
from routing.upstream.translate import messages_passthrough
from routing.upstream.translate.chat_to_anthropic import translate_sse
from routing.upstream.translate.messages_passthrough import AnthropicRelay
from routing.upstream.translate.responses_passthrough import ResponsesRelay, held_until_content
from tests.upstream.conftest import model

WIRE = Path(__file__).resolve().parent.parent / "fixtures" / "wire"


async def burst(data: bytes) -> AsyncIterator[bytes]:
    yield data  # the whole stream in the gateway's first read


async def relayed(
    chunks: AsyncIterator[bytes], tap: Any, monkeypatch: pytest.MonkeyPatch, shape: bool
) -> tuple[list, int]:
    """The body messages a client gets, and how many frames had been read when the first left
    (as routing.gateway.proxy relays: a shape's first chunk whole, a chat stream's split at its commit)."""
    read = [0]
    parse = sse.parse_frame

    def counted(frame: bytes) -> tuple[bytes | None, bytes | None]:
        read[0] += 1
        return parse(frame)

    monkeypatch.setattr(sse, "parse_frame", counted)
    sent: list[tuple[bytes, int]] = []

    async def send(message: dict) -> None:
        sent.append((message["body"], read[0]))

    committed = await open_stream(chunks, 30.0, 60.0, 1e12)
    try:
        await _relay(send, committed, tap, None, None, 0 if shape else committed.commit_end)
    finally:
        await committed.aclose()
    return [body for body, _ in sent], sent[0][1]


def frames(data: bytes) -> int:
    return data.count(b"\n\n")


async def test_a_relayed_responses_burst_sends_the_held_events_and_the_first_delta_first(monkeypatch) -> None:
    data = (WIRE / "responses_stream.sse").read_bytes()
    sent, read = await relayed(held_until_content(burst(data)), ResponsesRelay(), monkeypatch, shape=True)
    first_delta = data.index(b"event: response.output_text.delta")
    first_end = data.index(b"\n\n", first_delta) + 2
    assert sent[0] == data[:first_end]  # response.created ... the first delta, and nothing after it
    assert b"".join(sent) == data  # the same bytes
    assert read <= 2 * 5 < 2 * frames(data)  # framed by the shape and by the tap: five events each, not all


async def test_a_relayed_messages_burst_sends_the_held_events_and_the_first_delta_first(monkeypatch) -> None:
    data = (WIRE / "anthropic_stream.sse").read_bytes()
    stream = messages_passthrough.held_until_content(burst(data))
    sent, read = await relayed(stream, AnthropicRelay(), monkeypatch, shape=True)
    first_delta = data.index(b"event: content_block_delta")
    first_end = data.index(b"\n\n", first_delta) + 2
    assert sent[0] == data[:first_end]  # message_start, the thinking block's start, ping, the first delta: no more
    assert b"".join(sent) == data  # the same bytes
    assert read <= 2 * 4 < 2 * frames(data)  # framed by the pass-through and by the tap: four events each, not all


async def test_a_translated_anthropic_burst_sends_its_first_chunk_after_the_first_events(monkeypatch) -> None:
    data = (WIRE / "anthropic_stream.sse").read_bytes()
    spec = model("up-model")
    sent, read = await relayed(translate_sse(burst(data), spec), UsageTap(strip=False), monkeypatch, shape=False)
    whole = b"".join([chunk async for chunk in translate_sse(burst(data), spec)])
    assert b"".join(sent) == whole
    assert sent[0].startswith(b"data: ") and b'"role":"assistant"' in sent[0]
    # read up to the first text delta (the stream commits on it; a thinking delta alone does not), not all
    assert read <= 8 < frames(data)
