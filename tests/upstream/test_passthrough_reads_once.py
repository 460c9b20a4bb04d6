"""A relayed Responses or Messages stream is read once on the gateway (docs/performance.md#read-once).

The pass-through (`held_until_content`) frames every upstream event to find the commit; its tap
(`ResponsesRelay`, `AnthropicRelay`) takes the frames as the pass-through read them instead of
framing the bytes again, and decodes JSON only where the usage is (a Responses delta's text is
decoded only when a cut stream's tokens are estimated). The client's bytes and the usage recorded
are the upstream's, unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from routing.core import sse
from routing.core.stream import SAMPLE_BYTES, open_stream, relayed_tokens
from routing.gateway.proxy import _relay
from routing.upstream.translate import messages_passthrough, responses_passthrough
from routing.upstream.translate.messages_passthrough import AnthropicRelay
from routing.upstream.translate.responses_passthrough import ResponsesRelay
from routing.upstream.translate.shared import framed, frames_of

DELTAS = 40
USAGE = {"input_tokens": 37, "input_tokens_details": {"cached_tokens": 5}, "output_tokens": 41, "total_tokens": 78}


def event(name: str, data: dict[str, Any]) -> bytes:
    return sse.json_event(name, data)


def responses_stream(deltas: list[str], completed: bool = True) -> bytes:
    """A Responses event stream as OpenAI sends it: preamble, `deltas`, the done events, response.completed."""
    names = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    names += ["response.output_text.delta"] * len(deltas)
    names += ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    texts = iter(deltas)
    frames = []
    for seq, name in enumerate(names):
        data: dict[str, Any] = {"type": name, "sequence_number": seq, "output_index": 0}
        if name.endswith(".delta"):
            data |= {"item_id": "msg_1", "content_index": 0, "delta": next(texts)}
        frames.append(event(name, data))
    if completed:
        response = {"id": "resp_1", "status": "completed", "output": [], "usage": USAGE}
        frames.append(
            event("response.completed", {"type": "response.completed", "sequence_number": 99, "response": response})
        )
    return b"".join(frames)


def messages_stream(deltas: int) -> bytes:
    """An Anthropic event stream: message_start (input usage), a text block of `deltas`, message_delta (output)."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {"input_tokens": 25, "output_tokens": 1},
    }
    frames = [event("message_start", {"type": "message_start", "message": start}), event("ping", {"type": "ping"})]
    frames.append(
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
    )
    for i in range(deltas):
        delta = {"type": "text_delta", "text": f"word {i} "}
        frames.append(event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    frames.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}
    frames += [event("message_delta", stop), event("message_stop", {"type": "message_stop"})]
    return b"".join(frames)


async def in_reads(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


class Reads:
    """How often an SSE frame is split out (`parse_frame`) and a JSON text decoded (`orjson.loads`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.frames = 0
        self.decoded: list[bytes] = []
        parse, loads = sse.parse_frame, orjson.loads

        def counted_parse(frame: bytes) -> tuple[bytes | None, bytes | None]:
            self.frames += 1
            return parse(frame)

        def counted_loads(data: Any) -> Any:
            self.decoded.append(bytes(data))
            return loads(data)

        monkeypatch.setattr(sse, "parse_frame", counted_parse)
        monkeypatch.setattr(orjson, "loads", counted_loads)


async def relay(chunks: AsyncIterator[bytes], tap: Any) -> bytes:
    """What the client gets of a committed pass-through stream, as routing.gateway.proxy relays a shape's."""
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["body"])

    committed = await open_stream(chunks, 30.0, 60.0, 1e12)
    try:
        await _relay(send, committed, tap, None, None, 0)
    finally:
        await committed.aclose()
    return b"".join(sent)


@pytest.mark.parametrize("size", [1 << 20, 300])
async def test_a_relayed_responses_stream_is_framed_once_and_decodes_only_its_completed_event(
    monkeypatch, size
) -> None:
    data = responses_stream([f"word {i} " for i in range(DELTAS)])
    events = data.count(b"\n\n")
    reads = Reads(monkeypatch)
    tap = ResponsesRelay()
    out = await relay(responses_passthrough.held_until_content(in_reads(data, size)), tap)
    assert out == data  # the client's bytes: the upstream's, unchanged
    # each event framed once by the pass-through, the tap reading those frames; the commit's check reads one more
    assert reads.frames <= events + 1 < 2 * events
    assert len(reads.decoded) == 1 and reads.decoded[0].startswith(b'{"type":"response.completed"')
    assert (tap.prompt_tokens, tap.completion_tokens, tap.final) == (37, 41, True)
    assert tap.classes == {"cache_read": 5}


@pytest.mark.parametrize("size", [1 << 20, 300])
async def test_a_relayed_messages_stream_is_framed_once_with_its_usage(monkeypatch, size) -> None:
    data = messages_stream(DELTAS)
    events = data.count(b"\n\n")
    reads = Reads(monkeypatch)
    tap = AnthropicRelay()
    out = await relay(messages_passthrough.held_until_content(in_reads(data, size)), tap)
    assert out == data
    assert reads.frames <= events + 1 < 2 * events
    # the commit's text-block check and the two usage events; no delta
    assert len(reads.decoded) == 3 and not any(b"content_block_delta" in d for d in reads.decoded)
    assert (tap.prompt_tokens, tap.completion_tokens, tap.final) == (25, 42, True)


def old_estimate(deltas: list[str]) -> int:
    """A cut stream's completion tokens as the tap counted them when it decoded every delta it relayed."""
    chars = 0
    for text in deltas:
        if chars < SAMPLE_BYTES * 4:
            chars += len(text)
    return relayed_tokens(chars, len(deltas))


@pytest.mark.parametrize(
    "deltas",
    [
        ["Hél", "lo", ""],  # a short cut stream: nothing decoded until the estimate
        ["x" * 5000 + "é"] * 70,  # past SAMPLE_BYTES kept: counted on the way, in order
        ["y" * 9000] * 130,  # past the characters counted: the frames still count
    ],
    ids=["short", "kept-past-sample", "past-counted"],
)
async def test_a_cut_responses_stream_is_estimated_as_before(deltas: list[str]) -> None:
    data = responses_stream(deltas, completed=False)
    tap = ResponsesRelay()
    out = b"".join([tap.feed(chunk) async for chunk in responses_passthrough.held_until_content(in_reads(data, 4096))])
    assert out == data
    assert not tap.final
    assert tap.estimated_completion_tokens() == old_estimate(deltas)
    assert tap.estimated_completion_tokens() == old_estimate(deltas)  # asked twice: the same


def test_a_tap_takes_a_pass_through_chunks_frames_only_when_nothing_is_pending() -> None:
    whole = b'data: {"n":1}\n\n'
    chunk = framed([(whole, None, b'{"n":1}')])
    assert bytes(chunk) == whole and type(chunk + b"") is bytes  # rebuilt, it is plain bytes again
    assert list(frames_of(bytearray(), chunk)) == [(whole, None, b'{"n":1}')]
    pending = bytearray(b"event: a\n")  # the start of a frame cut across plain chunks
    assert list(frames_of(pending, chunk)) == [(b"event: a\n" + whole, b"a", b'{"n":1}')]
    assert list(frames_of(bytearray(), whole)) == [(whole, None, b'{"n":1}')]  # plain bytes: framed by the tap
