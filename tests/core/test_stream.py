"""Stream commit point and relay (docs/resilience.md#r6, #r7)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from routing.core.failures import FailureKind as K
from routing.core.failures import UpstreamFailure
from routing.core.stream import open_stream
from tests.core.fakes import FakeClock

FRAME1 = b'data: {"id":"c1","choices":[{"delta":{"content":"Hel"}}]}\n\n'
FRAME2 = b'data: {"id":"c1","choices":[{"delta":{"content":"lo"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
HANG = object()


class Source:
    """An upstream chunk iterator that records whether it was closed."""

    def __init__(self, *items: object) -> None:
        self.items = list(items)
        self.closed = False
        self.wake = asyncio.Event()

    async def gen(self) -> AsyncIterator[bytes]:
        try:
            for item in self.items:
                if item is HANG:
                    await self.wake.wait()
                    raise ConnectionResetError("connection aborted")
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
        finally:
            self.closed = True


async def opened(
    src: Source, first_token_s: float = 30.0, idle_s: float = 60.0, deadline_in: float = 600.0, close=None
):
    clock = FakeClock()
    return await open_stream(src.gen(), first_token_s, idle_s, clock() + deadline_in, clock=clock, close=close)


async def collect(stream) -> list[bytes]:
    out = []
    async for chunk in stream.relay():
        out.append(chunk)
    return out


def error_code(frame: bytes) -> str:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    return orjson.loads(frame[6:])["error"]["code"]


async def test_first_content_frame_commits_and_relay_is_byte_identical() -> None:
    chunks = [b": keep-alive\n\n", b"event: message\n", FRAME1, FRAME2[:10], FRAME2[10:] + DONE]
    src = Source(*chunks)
    stream = await opened(src)
    assert stream.first == b"".join(chunks[:3])
    out = await collect(stream)
    assert b"".join(out) == b"".join(chunks)
    assert out[1:] == chunks[3:]  # later chunks are passed through unchanged, one by one
    assert stream.done_seen
    assert src.closed


async def test_comment_and_empty_data_frames_do_not_commit() -> None:
    src = Source(b": ping\n\n", b"data: \n\n", b"data:\n\n")
    with pytest.raises(UpstreamFailure) as exc:
        await opened(src)
    assert exc.value.kind is K.EMPTY_STREAM
    assert src.closed


async def test_error_frame_before_content_is_a_stream_error() -> None:
    src = Source(b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n', FRAME1)
    with pytest.raises(UpstreamFailure) as exc:
        await opened(src)
    assert exc.value.kind is K.STREAM_ERROR and exc.value.is_retryable
    assert "overloaded" in exc.value.message
    assert src.closed


async def test_done_before_content_is_an_empty_stream() -> None:
    with pytest.raises(UpstreamFailure) as exc:
        await opened(Source(b": hi\n\n" + DONE))
    assert exc.value.kind is K.EMPTY_STREAM


@pytest.mark.parametrize("chunks", [(), (b'data: {"partial": tru',)])
async def test_eof_before_a_complete_frame_is_an_empty_stream(chunks: tuple[bytes, ...]) -> None:
    with pytest.raises(UpstreamFailure) as exc:
        await opened(Source(*chunks))
    assert exc.value.kind is K.EMPTY_STREAM


async def test_exception_before_commit_is_a_stream_error() -> None:
    src = Source(b": hi\n\n", ConnectionResetError("reset by peer"))
    with pytest.raises(UpstreamFailure) as exc:
        await opened(src)
    assert exc.value.kind is K.STREAM_ERROR
    assert src.closed


async def test_upstream_failure_from_the_source_keeps_its_kind() -> None:
    with pytest.raises(UpstreamFailure) as exc:
        await opened(Source(UpstreamFailure(K.READ_TIMEOUT, "read timed out")))
    assert exc.value.kind is K.READ_TIMEOUT


async def test_no_frame_within_first_token_timeout() -> None:
    src = Source(b": hi\n\n", HANG)
    with pytest.raises(UpstreamFailure) as exc:
        await asyncio.wait_for(opened(src, first_token_s=0.02), 5)
    assert exc.value.kind is K.FIRST_TOKEN_TIMEOUT
    assert src.closed


async def test_first_token_wait_is_capped_by_the_deadline() -> None:
    src = Source(HANG)
    with pytest.raises(UpstreamFailure) as exc:
        await asyncio.wait_for(opened(src, first_token_s=30.0, deadline_in=0.02), 5)
    assert exc.value.kind is K.FIRST_TOKEN_TIMEOUT


async def test_idle_silence_after_commit_ends_with_one_terminal_frame() -> None:
    src = Source(FRAME1, HANG)
    stream = await opened(src, idle_s=0.02)
    out = await asyncio.wait_for(collect(stream), 5)
    assert out[0] == FRAME1
    assert len(out) == 2 and error_code(out[1]) == "first_token_timeout"
    assert b"[DONE]" not in out[1]
    assert src.closed


async def test_missing_done_ends_with_upstream_stream_error_frame() -> None:
    stream = await opened(Source(FRAME1, FRAME2))
    out = await collect(stream)
    assert out[:2] == [FRAME1, FRAME2]
    assert len(out) == 3 and error_code(out[2]) == "upstream_stream_error"
    body = orjson.loads(out[2][6:])
    assert set(body["error"]) == {"message", "type", "code", "param"} and body["error"]["param"] is None


async def test_break_after_commit_ends_with_upstream_stream_error_frame() -> None:
    stream = await opened(Source(FRAME1, ConnectionResetError("gone")))
    out = await collect(stream)
    assert len(out) == 2 and error_code(out[1]) == "upstream_stream_error"


async def test_terminal_frame_never_glues_onto_a_half_sent_frame() -> None:
    stream = await opened(Source(FRAME1, b'data: {"id":"c1","cho'))
    out = await collect(stream)
    assert out[2].startswith(b"\n\ndata: ")


@pytest.mark.parametrize(
    "tail",
    [
        [b"da", b"ta: [DO", b"NE]\n\n"],
        [b"data: [", b"DONE]\n\n"],
        [b"data: [DONE]\n", b"\n"],
    ],
)
async def test_done_split_across_chunks_is_recognised(tail: list[bytes]) -> None:
    stream = await opened(Source(FRAME1, FRAME2, *tail))
    out = await collect(stream)
    assert b"".join(out) == FRAME1 + FRAME2 + b"".join(tail)
    assert b"error" not in b"".join(out[1:])


async def test_done_after_a_newline_sent_alone_is_recognised() -> None:
    chunks = [FRAME1, FRAME2[:-1], b"\n", b"data:[DONE]\n\n"]
    out = await collect(await opened(Source(*chunks)))
    assert out == chunks
    assert b"error" not in b"".join(out[1:])


async def test_done_in_the_first_chunk_is_recognised() -> None:
    stream = await opened(Source(FRAME1 + FRAME2 + DONE))
    assert await collect(stream) == [FRAME1 + FRAME2 + DONE]


async def test_crlf_framing_commits_and_ends_cleanly() -> None:
    chunks = [b": x\r\n\r\n", b'data: {"a":1}\r\n\r\n', b"data: [DONE]\r\n\r\n"]
    stream = await opened(Source(*chunks))
    assert b"".join(await collect(stream)) == b"".join(chunks)


async def test_done_text_inside_content_does_not_count_as_the_terminator() -> None:
    content = b'data: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\n'
    out = await collect(await opened(Source(FRAME1, content)))
    assert error_code(out[-1]) == "upstream_stream_error"


async def test_upstream_error_frame_after_commit_is_relayed_without_a_second_terminal() -> None:
    err = b'data: {"error": {"message": "overloaded"}}\n\n'
    out = await collect(await opened(Source(FRAME1, err)))
    assert out == [FRAME1, err]


async def test_aclose_closes_the_source_and_the_connection() -> None:
    src = Source(FRAME1, FRAME2, DONE)
    closed = []

    async def close() -> None:
        closed.append(True)

    stream = await opened(src, close=close)
    relay = stream.relay()
    assert await relay.__anext__() == FRAME1
    await stream.aclose()
    assert src.closed and closed == [True]
    await stream.aclose()  # idempotent
    assert closed == [True]


async def test_aclose_from_another_task_aborts_a_waiting_relay_promptly() -> None:
    src = Source(FRAME1, HANG)

    async def close() -> None:
        src.wake.set()  # like closing the HTTP response: the pending read fails at once

    stream = await opened(src, close=close)
    got: list[bytes] = []

    async def consume() -> None:
        async for chunk in stream.relay():
            got.append(chunk)

    task = asyncio.create_task(consume())
    for _ in range(5):
        await asyncio.sleep(0)
    assert got == [FRAME1]
    await stream.aclose()
    await asyncio.wait_for(task, 5)  # ends at once; the bound only turns a hang into a failure
    assert got == [FRAME1]  # the client is gone: no terminal frame
    assert src.closed


async def test_cancelling_the_relay_task_closes_the_source() -> None:
    src = Source(FRAME1, HANG)
    stream = await opened(src)
    task = asyncio.create_task(collect(stream))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert src.closed


async def test_cancelling_the_peek_closes_the_source() -> None:
    src = Source(HANG)
    task = asyncio.create_task(opened(src))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert src.closed


# --- the commit point is the first *content* frame (docs/resilience.md#r6) ------------------

ROLE = b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
EMPTY_DELTA = b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":null}]}\n\n'


@pytest.mark.parametrize(
    "content",
    [
        FRAME1,
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f"}}]}}]}\n\n',
        b'data: {"choices":[{"delta":{"refusal":"no"}}]}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
    ],
    ids=["text", "tool_call", "refusal", "finish_reason"],
)
async def test_role_only_and_empty_chunks_are_held_until_the_first_content_frame(content: bytes) -> None:
    chunks = [ROLE, b": keep-alive\n\n", EMPTY_DELTA, content, DONE]
    src = Source(*chunks)
    stream = await opened(src)
    assert stream.first == b"".join(chunks[:4])  # the held preamble goes out first, byte-identical
    assert b"".join(await collect(stream)) == b"".join(chunks)


async def test_failure_after_the_role_chunk_is_before_the_commit() -> None:
    src = Source(ROLE, ConnectionResetError("reset"))
    with pytest.raises(UpstreamFailure) as exc:
        await opened(src)
    assert exc.value.kind is K.STREAM_ERROR and exc.value.is_retryable
    assert src.closed


async def test_end_after_the_role_chunk_is_an_empty_stream() -> None:
    for tail in (DONE, None):
        src = Source(ROLE, *([tail] if tail else []))
        with pytest.raises(UpstreamFailure) as exc:
            await opened(src)
        assert exc.value.kind is K.EMPTY_STREAM


async def test_first_token_timeout_runs_until_the_first_content_frame() -> None:
    src = Source(ROLE, EMPTY_DELTA, HANG)
    with pytest.raises(UpstreamFailure) as exc:
        await asyncio.wait_for(opened(src, first_token_s=0.02), 5)
    assert exc.value.kind is K.FIRST_TOKEN_TIMEOUT
    assert src.closed


async def test_a_preamble_of_more_than_16_frames_commits_anyway() -> None:
    preamble = [EMPTY_DELTA] * 16
    src = Source(*preamble, EMPTY_DELTA, FRAME1, DONE)
    stream = await opened(src)
    assert stream.first == b"".join(preamble) + EMPTY_DELTA  # committed on the 17th frame, before any content
    assert b"".join(await collect(stream)) == b"".join([*preamble, EMPTY_DELTA, FRAME1, DONE])


async def test_a_preamble_over_64_kib_commits_anyway() -> None:
    big = b": " + b"x" * (64 * 1024) + b"\n\n"
    src = Source(ROLE, big, FRAME1, DONE)
    stream = await opened(src)
    assert stream.first == ROLE + big
    assert b"".join(await collect(stream)) == ROLE + big + FRAME1 + DONE


async def test_data_that_is_not_an_openai_chunk_commits_as_before() -> None:
    frame = b'data: {"type":"message_start","message":{}}\n\n'
    stream = await opened(Source(frame, DONE))
    assert stream.first == frame


# --- usage on every stream: the tap (docs/metrics.md#usage-records) -------------------------

USAGE = b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}\n\n'
FINISH = b'data: {"id":"c1","choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'


def tapped(tap, chunks: list[bytes]) -> bytes:
    return b"".join(tap.feed(c) for c in chunks) + tap.flush()


def test_the_tap_keeps_back_only_the_usage_frame_it_asked_for() -> None:
    from routing.core.stream import UsageTap

    tap = UsageTap(strip=True)
    stream = ROLE + FRAME1 + FINISH + USAGE + DONE
    cuts = [stream[:7], stream[7:150], stream[150:151], stream[151:-20], stream[-20:]]  # frames cut anywhere
    assert tapped(tap, cuts) == ROLE + FRAME1 + FINISH + DONE
    assert (tap.prompt_tokens, tap.completion_tokens) == (12, 7)


def test_the_tap_passes_everything_when_the_client_asked_for_usage() -> None:
    from routing.core.stream import UsageTap

    tap = UsageTap(strip=False)
    chunks = [ROLE + FRAME1, FINISH + USAGE[:30], USAGE[30:] + DONE]
    out = [tap.feed(c) for c in chunks]
    assert out == chunks  # untouched, chunk for chunk
    assert (tap.prompt_tokens, tap.completion_tokens) == (12, 7)


def test_the_tap_keeps_a_finish_frame_that_carries_usage_and_crlf_frames() -> None:
    from routing.core.stream import UsageTap

    tap = UsageTap(strip=True)
    finish_with_usage = b'data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}\r\n\r\n'
    crlf = FRAME1.replace(b"\n\n", b"\r\n\r\n")
    assert tapped(tap, [crlf, finish_with_usage, b"data: [DONE]\r\n\r\n"]) == (
        crlf + finish_with_usage + b"data: [DONE]\r\n\r\n"
    )
    assert (tap.prompt_tokens, tap.completion_tokens) == (3, 2)


def test_an_unfinished_last_frame_is_flushed_as_sent() -> None:
    from routing.core.stream import UsageTap

    tap = UsageTap(strip=True)
    assert tap.feed(FRAME1 + b'data: {"partial"') == FRAME1
    assert tap.flush() == b'data: {"partial"'


# --- found by mutation testing (make mutation): how each kind of pre-commit frame is read


@pytest.mark.parametrize(
    ("frame", "outcome"),
    [
        (b": comment with data: inside\n\n", "empty"),  # a comment line never counts
        (b":\n\n", "empty"),
        (b"data:[DONE]\n\n", "empty"),  # no space after the colon is still a data line
        (b"data:  [DONE]  \n\n", "empty"),
        (b"event: ping\n\n", "empty"),  # an event without data is not content
        (b"retry: 100\nid: 7\n\n", "empty"),
        (b"dat: x\n\n", "empty"),  # not a data field
        (b"datax: {}\n\n", "empty"),
        (b"data: x\n\n", "content"),
        (b"data:x\n\n", "content"),
        (b"event: message\ndata: x\n\n", "content"),
        (b"data: first line\ndata: second\n\n", "content"),
        (b"event: error\ndata: x\n\n", "error"),  # an SSE error event before any content
        (b"event:error\ndata: x\n\n", "error"),
        (b"event: error \ndata: x\n\n", "error"),
        (b'data: {"error": "flat string"}\n\n', "error"),
        (b'data: {"error": null, "id": "x"}\n\n', "content"),  # an empty error field is not one
        (b'data: {"id": "x", "text": "the word \\"error\\" in content"}\n\n', "content"),
        (b'data: {"error": broken json\n\n', "content"),
    ],
)
async def test_each_kind_of_frame_before_content(frame: bytes, outcome: str) -> None:
    src = Source(frame, DONE)
    if outcome == "content":
        stream = await opened(src)
        assert stream.first == frame
        await stream.aclose()
        return
    with pytest.raises(UpstreamFailure) as exc:
        await opened(src)
    assert exc.value.kind is (K.EMPTY_STREAM if outcome == "empty" else K.STREAM_ERROR)


def test_tokens_are_estimated_from_the_relayed_text_when_no_usage_comes() -> None:
    from routing.core import stream as stream_mod
    from routing.core.stream import UsageTap

    text = b'data: {"choices":[{"delta":{"content":"abcdefgh"}}]}\n\n'  # 8 characters of content
    call = b'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\\"a\\":1}"}}]}}]}\n\n'
    tap = UsageTap(strip=True)
    for chunk in (ROLE, text, call, text, DONE):
        tap.feed(chunk)
    assert tap.prompt_tokens is None
    assert tap.estimated_completion_tokens() == -(-(8 + 7 + 8) // 4)  # content and tool-call arguments
    long = UsageTap(strip=True)
    frames = [text] * (2 * stream_mod.SAMPLE_BYTES // len(text))
    for chunk in frames:
        long.feed(chunk)
    # only the first SAMPLE_BYTES are kept; the estimate scales to the whole stream
    assert abs(long.estimated_completion_tokens() - len(frames) * 8 / 4) <= len(frames) * 8 / 4 * 0.01


# What a llama.cpp-based OpenAI-compatible server really sends: a role-only first chunk
# without a `content` key, one chunk per token (spaces after the colons, escaped
# non-ASCII), an empty delta with the finish reason, the terminator; no usage frame.
def _real_chunk(delta: str, finish: str = "null") -> bytes:
    return (
        b'data: {"id": "chatcmpl-a70d7de0", "model": "gemma", "created": 1796115188, '
        b'"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": '
        + delta.encode()
        + b', "logprobs": null, "finish_reason": '
        + finish.encode()
        + b"}]}\n\n"
    )


REAL_STREAM = [
    _real_chunk('{"role": "assistant"}'),
    _real_chunk('{"content": "Say"}'),
    _real_chunk('{"content": " hi"}'),
    _real_chunk('{"content": "\\u306b\\u884c"}'),
    _real_chunk("{}", '"stop"'),
    DONE,
]


async def test_a_real_server_shaped_stream_goes_out_byte_identical_one_chunk_per_frame() -> None:
    from routing.core.stream import UsageTap

    src = Source(*REAL_STREAM)
    stream = await opened(src)
    assert stream.first == REAL_STREAM[0] + REAL_STREAM[1]  # the role chunk held, sent with the first content
    tap = UsageTap(strip=True)  # as when the gateway asked for usage the server ignores
    out = [tap.feed(chunk) for chunk in await collect(stream)]
    out.append(tap.flush())
    assert b"".join(out) == b"".join(REAL_STREAM)
    assert out[1:-1] == REAL_STREAM[2:]  # each later chunk goes out as it came, one send each
    assert stream.ending == "ok"
    assert tap.prompt_tokens is None and tap.estimated_completion_tokens() > 0


class Paced:
    """A source that yields each chunk only when the test lets it (no sleeps to hope on)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def gen(self) -> AsyncIterator[bytes]:
        try:
            while (item := await self.queue.get()) is not None:
                yield item
        finally:
            self.closed = True


async def test_reads_that_each_come_within_the_idle_timeout_never_time_out() -> None:
    # One timer serves the whole stream: when it fires during a later read than the one it
    # was set for, it must wait for that read's own end instead of cancelling it.
    idle = 0.2
    src = Paced()
    src.queue.put_nowait(FRAME1)
    stream = await open_stream(src.gen(), 30.0, idle, time.monotonic() + 600)
    task = asyncio.create_task(collect(stream))  # reads all the time: the timer fires mid-read
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() - started < 3 * idle and not task.done():  # bounded: three idle periods
        await asyncio.sleep(idle / 4)
        src.queue.put_nowait(FRAME2)
    src.queue.put_nowait(DONE)
    got = await asyncio.wait_for(task, 5)
    assert got[-1] == DONE and set(got) == {FRAME1, FRAME2, DONE}  # no terminal frame among them
    assert len(got) >= 8 and stream.ending == "ok"
    assert src.closed


async def test_an_idle_timeout_after_some_chunks_leaves_the_serving_task_usable() -> None:
    # The timeout is delivered as a cancel of the reading task; once the terminal frame is
    # out, that cancel must be spent, or the gateway's closing sends would be cancelled too.
    src = Paced()
    src.queue.put_nowait(FRAME1)
    stream = await open_stream(src.gen(), 30.0, 0.05, time.monotonic() + 600)
    relay = stream.relay()
    assert await relay.__anext__() == FRAME1
    src.queue.put_nowait(FRAME2)
    assert await relay.__anext__() == FRAME2
    task = asyncio.current_task()
    assert task is not None
    guard = asyncio.get_running_loop().call_later(5, task.cancel)  # a hang fails instead of blocking
    last = await relay.__anext__()  # in this task, as the gateway's relay runs in the request's
    guard.cancel()
    assert error_code(last) == "first_token_timeout"  # the code of a silent stream (docs/errors.md)
    with pytest.raises(StopAsyncIteration):
        await relay.__anext__()
    assert task.cancelling() == 0
    await asyncio.sleep(0.06)  # past where a stray timer of the stream would fire
    assert src.closed and stream.ending == "first_token_timeout"


async def test_a_cancel_from_outside_during_a_read_is_not_taken_for_a_timeout() -> None:
    src = Paced()
    src.queue.put_nowait(FRAME1)
    stream = await open_stream(src.gen(), 30.0, 0.05, time.monotonic() + 600)
    got: list[bytes] = []

    async def consume() -> None:
        async for chunk in stream.relay():
            got.append(chunk)

    task = asyncio.create_task(consume())
    while not got:
        await asyncio.sleep(0)
    task.cancel()  # the client went away while the relay waits for the upstream
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert got == [FRAME1]  # no terminal frame: nobody is there to read it
    assert src.closed and stream.ending is None


async def test_a_legacy_completions_text_chunk_commits_at_once() -> None:
    """/v1/completions streams `choices[].text`, no delta: its first text is the first content."""
    text = b'data: {"object":"text_completion","choices":[{"text":"Hel","index":0,"finish_reason":null}]}\n\n'
    src = Source(text, HANG)
    stream = await opened(src)  # without the text rule it would wait for more frames, and hang
    assert stream.first == text
    src.wake.set()


def test_a_cut_stream_of_short_tokens_counts_at_least_one_token_a_frame_of_text() -> None:
    """docs/usage-records.md#partial: ten frames of one character are ten tokens, not three."""
    from routing.core.stream import UsageTap

    tap = UsageTap(strip=True)
    tap.feed(ROLE)  # no text: not a token
    for ch in "abcdefghij":
        tap.feed(b'data: {"choices":[{"delta":{"content":"' + ch.encode() + b'"}}]}\n\n')
    assert not tap.final
    assert tap.estimated_completion_tokens() == 10
