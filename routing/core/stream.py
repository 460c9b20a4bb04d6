"""Streaming commit point and relay (docs/resilience.md#r6, #r7).

`open_stream` peeks the upstream's first SSE content frame under the first-token
timeout. Frames before it that carry no content — OpenAI's role-only first chunk,
empty deltas, comments and keep-alives — are held (at most `HOLD_MAX_FRAMES` frames
or `HOLD_MAX_BYTES` bytes; past that the stream commits anyway) and go out ahead of
the first content frame, byte-identical. Anything that goes wrong before the commit
(an error frame, `[DONE]` or the end before any content, a broken connection,
silence) is raised as an `UpstreamFailure` so the executor may retry or fail over.
The first content frame commits: from then on
`CommittedStream.relay()` passes the upstream bytes through unchanged and, if the
stream breaks, falls silent or ends without `data: [DONE]`, ends it with one
terminal `data: {"error": ...}` frame instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.prices import token_classes
from routing.core.sse import FRAME_END, complete_end, data_frame, parse_frame

HOLD_MAX_FRAMES = 16  # frames without content held before the commit ...
HOLD_MAX_BYTES = 64 * 1024  # ... or bytes: past either bound the stream commits anyway
_DONE_MARKERS = (b"\ndata: [DONE]", b"\ndata:[DONE]")
_TAIL = 16  # bytes kept to find a marker split across chunks
_NOT_CONTENT = 0
_CONTENT = 1


def _examine(frame: bytes) -> int:
    """Classify one complete pre-commit frame (normalised to \\n line ends)."""
    event = None
    if frame[:6] == b"data: " and b"\n" not in frame:
        data = frame[6:].strip()  # the usual one-line frame: no line loop
    else:
        event, joined = parse_frame(frame)
        if joined is None:
            return _NOT_CONTENT
        data = joined.strip()
    if not data:
        return _NOT_CONTENT
    if data == b"[DONE]":
        raise UpstreamFailure(FailureKind.EMPTY_STREAM, "the upstream stream ended before any content")
    if event == b"error":
        raise UpstreamFailure(FailureKind.STREAM_ERROR, "the upstream stream started with an error event", body=data)
    if data[:1] != b"{":
        return _CONTENT
    has_error = b'"error"' in data
    if not has_error and b'"choices"' not in data:
        return _CONTENT
    try:
        obj = orjson.loads(data)  # once, for both questions
    except orjson.JSONDecodeError:
        return _CONTENT
    if not isinstance(obj, dict):
        return _CONTENT
    if has_error and obj.get("error") is not None:
        err = obj["error"]
        detail = err.get("message") if isinstance(err, dict) else err
        raise UpstreamFailure(
            FailureKind.STREAM_ERROR, f"the upstream stream started with an error: {detail}", body=data
        )
    if b'"choices"' in data and not _carries_content(obj):
        return _NOT_CONTENT
    return _CONTENT


def _carries_content(chunk: dict) -> bool:
    """Whether an OpenAI chat chunk carries content: text, a tool call, a refusal or a finish reason.

    A chunk without a `choices` list is not an OpenAI chunk: any data counts as content then.
    """
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return True
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") or choice.get("text"):  # `text`: a legacy completions chunk
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("tool_calls") or delta.get("refusal") or delta.get("function_call")
        ):
            return True
    return False


def _scan(buf: bytes, seen: int) -> tuple[bool, int]:
    """Look at complete frames not examined yet; True once a content frame is found
    (or once more than HOLD_MAX_FRAMES complete frames are held)."""
    text = buf
    if b"\r" in text:
        text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    frames = text.split(b"\n\n")
    complete = len(frames) - 1
    for i in range(seen, complete):
        if _examine(frames[i]) == _CONTENT or i >= HOLD_MAX_FRAMES:
            return True, i + 1
    return False, max(seen, complete)


def _has_done(tail: bytes, chunk: bytes) -> bool:
    if b"[DONE]" in chunk:
        joined = tail + chunk
    else:
        if not tail:
            return False
        joined = tail + chunk[:_TAIL]
    return _DONE_MARKERS[0] in joined or _DONE_MARKERS[1] in joined


def _next_tail(tail: bytes, chunk: bytes) -> bytes:
    return chunk[-_TAIL:] if len(chunk) >= _TAIL else (tail + chunk)[-_TAIL:]


class _Watchdog:
    """The idle and total timeouts of a relay's reads with one timer per stream.

    An `asyncio.timeout` per chunk costs about 5 us (a context object, a timer
    scheduled and cancelled); a long stream of one token per chunk paid that
    hundreds of times. Here each read only moves `_expires` forward; the timer
    fires at the earliest end it was set for, re-arms itself to the current end if
    a read came since, and cancels the reading task only when the read it sees is
    past its end (asyncio.timeout's semantics: `expired()` tells our cancel from
    anyone else's, and the task's cancel count is restored).
    Measured in docs/streaming-performance.md#steps.
    """

    __slots__ = ("reading", "_loop", "_task", "_handle", "_when", "_expires", "_fired", "_cancelling")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0  # when _handle fires
        self._expires = 0.0  # when the current read is late
        self._fired = False
        self._cancelling = 0
        self.reading = False

    def arm(self, wait: float) -> None:
        """Before a read: it may take `wait` seconds."""
        loop = self._loop
        self._expires = expires = loop.time() + wait
        self._task = asyncio.current_task()
        self.reading = True
        handle = self._handle
        if handle is None or self._when > expires:
            if handle is not None:
                handle.cancel()
            self._when = expires
            self._handle = loop.call_at(expires, self._check)

    def _check(self) -> None:
        self._handle = None
        task = self._task
        if not self.reading or task is None or task.done():
            return  # no read in progress: the next arm() sets a timer again
        if self._loop.time() < self._expires:
            self._when = self._expires
            self._handle = self._loop.call_at(self._expires, self._check)
            return
        self._fired = True
        self._cancelling = task.cancelling()
        task.cancel()

    def expired(self) -> bool:
        """On a CancelledError: True when it is this watchdog's (then swallowed, like asyncio.timeout)."""
        if not self._fired:
            return False
        self._fired = False
        task = self._task
        return task is not None and task.uncancel() <= self._cancelling

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def terminal_frame(error: GatewayError) -> bytes:
    """The one SSE frame that ends a committed stream on error (no [DONE] follows)."""
    return data_frame(error.body())


async def _close_source(it: Any, close: Callable[[], Awaitable[Any]] | None) -> None:
    aclose = getattr(it, "aclose", None)
    try:
        if aclose is not None:
            await aclose()
    except RuntimeError:  # still running in another task: closing the connection below stops it
        pass
    finally:
        if close is not None:
            await close()


def _no_first_token(first_token_timeout_s: float) -> UpstreamFailure:
    return UpstreamFailure(FailureKind.FIRST_TOKEN_TIMEOUT, f"no first token within {first_token_timeout_s:g} s")


async def open_stream(
    chunks: AsyncIterator[bytes],
    first_token_timeout_s: float,
    idle_timeout_s: float,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    close: Callable[[], Awaitable[Any]] | None = None,
) -> CommittedStream:
    """Wait for the first content frame; raise UpstreamFailure if the stream fails before it.

    `close` (optional) aborts the upstream response, e.g. UpstreamResponse.close; it is
    called, with the source's own aclose, whenever the stream fails or is closed.
    """
    it = chunks.__aiter__()
    buf = b""
    seen = 0
    until = min(clock() + first_token_timeout_s, deadline)
    # One timer for the whole hold (its end is fixed), not one asyncio.timeout per read.
    cm = asyncio.timeout(until - clock())
    try:
        try:
            async with cm:
                while True:
                    if until - clock() <= 0:
                        raise _no_first_token(first_token_timeout_s)
                    try:
                        chunk = await it.__anext__()
                    except StopAsyncIteration:
                        raise UpstreamFailure(
                            FailureKind.EMPTY_STREAM, "the upstream stream ended before any content"
                        ) from None
                    except TimeoutError as exc:  # the source's own, not the hold's
                        raise UpstreamFailure(FailureKind.STREAM_ERROR, "the upstream stream timed out") from exc
                    except (UpstreamFailure, asyncio.CancelledError):
                        raise
                    except Exception as exc:
                        raise UpstreamFailure(FailureKind.STREAM_ERROR, f"the upstream stream broke: {exc!r}") from exc
                    if not chunk:
                        continue
                    buf = buf + chunk if buf else chunk
                    committed, seen = _scan(buf, seen)
                    if committed:
                        break
                    if len(buf) > HOLD_MAX_BYTES:
                        seen = 0  # a long preamble: commit and relay it rather than hold it
                        break
        except TimeoutError:
            if cm.expired():
                raise _no_first_token(first_token_timeout_s) from None
            raise
    except BaseException:
        await _close_source(it, close)
        raise
    return CommittedStream(it, buf, idle_timeout_s, deadline, clock, close, _commit_end(buf, seen))


def _commit_end(buf: bytes, frames: int) -> int:
    """Where the committing frame ends in `buf` (the `frames`-th complete frame; 0: the whole of `buf`).

    An upstream that sends faster than the gateway reads (a cached answer, a burst) hands over
    much of its stream in the first read; the bytes after the committing frame go out as a
    second message, so the first byte does not wait for the tap and the renamer to go
    through them (routing.gateway.proxy). CR line ends (rare) keep the whole buffer as one message."""
    if frames <= 0 or b"\r" in buf:
        return 0
    end = 0
    for _ in range(frames):
        end = buf.index(b"\n\n", end) + 2
    return 0 if end >= len(buf) else end


class CommittedStream:
    """A stream past its commit point: relay it, then aclose() it (always, in a finally)."""

    __slots__ = (
        "first",
        "committed_at",
        "_it",
        "_idle",
        "_deadline",
        "_clock",
        "_close",
        "_closed",
        "_finished",
        "_reading",
        "_done",
        "_tail",
        "end_code",
        "_errored",
        "commit_end",
    )

    def __init__(
        self,
        it: AsyncIterator[bytes],
        first: bytes,
        idle_timeout_s: float,
        deadline: float,
        clock: Callable[[], float],
        close: Callable[[], Awaitable[Any]] | None,
        split: int = 0,
    ) -> None:
        self.first = first  # the first content frame and whatever arrived with it
        # Where the committing frame ends in `first` (0: at its end, or not told): a relay may send the
        # frames up to it at once, before it goes through what arrived with them.
        self.commit_end = split
        self.committed_at = clock()
        self._it = it
        self._idle = idle_timeout_s
        self._deadline = deadline
        self._clock = clock
        self._close = close
        self._closed = False  # close requested: relay stops
        self._finished = False  # source and connection closed
        self._reading = False
        self._done = _has_done(b"\n", first)
        self._tail = first[-_TAIL:]
        self.end_code: str | None = None  # the code of the terminal frame the gateway sent, if any
        self._errored = False  # the upstream sent its own error frame

    @property
    def done_seen(self) -> bool:
        """Whether the upstream's `data: [DONE]` has been relayed."""
        return self._done

    @property
    def ending(self) -> str | None:
        """How the stream ended, for the breaker and the usage record (docs/resilience.md#r6):
        "ok" (the upstream's terminator), an error code (it broke, fell silent, ended without
        its terminator, sent its own error frame, or the deadline passed), or None (the
        relay was stopped from outside — the client went away — or has not ended)."""
        if self._done:
            return "ok"
        if self.end_code is not None:
            return self.end_code
        return "upstream_stream_error" if self._errored else None

    def _terminal(self, error: GatewayError) -> bytes:
        self.end_code = error.code
        frame = terminal_frame(error)
        tail = self._tail
        if tail and not (tail.endswith(b"\n\n") or tail.endswith(b"\r\n\r\n") or tail.endswith(b"\r\r")):
            frame = b"\n\n" + frame  # never glue our frame onto a half-sent upstream frame
        return frame

    async def relay(self) -> AsyncIterator[bytes]:
        """Yield the first bytes, then every upstream chunk as-is; at most one terminal frame."""
        watch = _Watchdog()
        try:
            yield self.first
            it = self._it
            clock = self._clock
            idle = self._idle
            errored = False  # the upstream sent its own error frame
            while not self._closed:
                left = self._deadline - clock()
                wait = idle if idle < left else left
                if wait <= 0:
                    if not (self._done or errored):
                        yield self._terminal(errors.total_timeout(while_streaming=True))
                    return
                watch.arm(wait)
                self._reading = True
                try:
                    chunk = await it.__anext__()
                except StopAsyncIteration:
                    if not (self._done or errored or self._closed):
                        yield self._terminal(errors.upstream_stream_error("it ended without data: [DONE]"))
                    return
                except asyncio.CancelledError:
                    if not watch.expired():
                        raise
                    if not (self._done or errored or self._closed):
                        if wait == idle:
                            yield self._terminal(errors.stream_idle_timeout(idle))
                        else:
                            yield self._terminal(errors.total_timeout(while_streaming=True))
                    return
                except TimeoutError:  # the source's own
                    if not (self._done or errored or self._closed):
                        yield self._terminal(errors.upstream_stream_error("it timed out"))
                    return
                except Exception:
                    if not (self._done or errored or self._closed):
                        yield self._terminal(errors.upstream_stream_error("it broke"))
                    return
                finally:
                    self._reading = False
                    watch.reading = False
                if not chunk:
                    continue
                if not self._done:
                    if _has_done(self._tail, chunk):
                        self._done = True
                    elif b'{"error"' in chunk:
                        self._errored = errored = True
                    self._tail = _next_tail(self._tail, chunk)
                yield chunk
        finally:
            watch.stop()
            self._closed = True
            await self._finish()

    async def aclose(self) -> None:
        """Abort the upstream now (client gone, or done). Safe to call more than once.

        From another task while relay() awaits the upstream, this aborts the connection
        (the `close` callback) and relay() ends without a terminal frame; without a
        `close` callback, cancel the task running relay() instead.
        """
        self._closed = True
        if self._reading:
            close, self._close = self._close, None
            if close is not None:
                await close()
            return
        await self._finish()

    async def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        close, self._close = self._close, None
        await _close_source(self._it, close)


SAMPLE_BYTES = 64 * 1024  # what a stream keeps of its relayed bytes to estimate tokens from


def relayed_tokens(chars: int, frames: int) -> int:
    """Completion tokens of relayed text: about four characters a token, at least one a frame of text."""
    return max(-(-chars // 4), frames)


class UsageTap:
    """Reads the token usage of a relayed OpenAI-style stream; optionally keeps the usage frame back.

    With `strip`, the gateway asked the upstream for `stream_options.include_usage` on
    the client's behalf: the usage-only frame (`"choices": []` with `usage`) is taken out
    and every other byte goes through as sent. Complete frames pass at once; a frame cut
    across chunks waits for its end (a client cannot use half a frame). Without `strip`,
    chunks pass untouched and complete frames mentioning "usage" are parsed.
    """

    __slots__ = ("strip", "prompt_tokens", "completion_tokens", "classes", "_pending", "_sample", "_sampled", "_total")

    def __init__(self, strip: bool) -> None:
        self.strip = strip
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None  # cached, reasoning, audio tokens (routing.core.prices)
        self._pending = b""
        self._sample: list[bytes] = []  # the first SAMPLE_BYTES relayed, to estimate from if no usage comes
        self._sampled = 0
        self._total = 0

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to relay for `chunk` (possibly fewer, never reordered)."""
        size = len(chunk)
        self._total += size
        if self._sampled < SAMPLE_BYTES:
            self._sample.append(chunk)
            self._sampled += size
        data = self._pending + chunk if self._pending else chunk
        end = complete_end(data)
        self._pending = data[end:]
        complete = data[:end]
        if not self.strip:
            if b'"usage"' in complete:
                for frame in FRAME_END.split(complete):
                    self._read(frame)
            return chunk
        if b'"usage"' not in complete:
            return complete
        out = []
        start = 0
        for match in FRAME_END.finditer(complete):
            frame = complete[start : match.end()]
            start = match.end()
            if not self._read(frame):
                out.append(frame)
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left of an unfinished last frame (sent as it is; already sent without `strip`)."""
        rest, self._pending = self._pending, b""
        return rest if self.strip else b""

    def estimated_completion_tokens(self) -> int:
        """Completion tokens estimated from the relayed text, for upstreams that send no usage.

        The text of the sampled frames (content, refusals, tool-call arguments) at about
        four characters a token, and at least one token for each frame that carried text (a
        provider sends about one token a frame: short tokens would otherwise be undercounted),
        scaled up when the stream was longer than the sample (docs/usage-records.md#partial).
        """
        chars = frames = 0
        sample = b"".join(self._sample)
        for line in sample.split(b"\n"):
            line = line.strip()
            if not line.startswith(b"data:") or b'"choices"' not in line:
                continue
            try:
                chunk = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            before = chars
            for choice in chunk.get("choices") or () if isinstance(chunk, dict) else ():
                if isinstance(choice, dict) and isinstance(choice.get("text"), str):  # legacy completions
                    chars += len(choice["text"])
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                for key in ("content", "refusal"):
                    if isinstance(delta.get(key), str):
                        chars += len(delta[key])
                for call in delta.get("tool_calls") or ():
                    arguments = call.get("function", {}).get("arguments") if isinstance(call, dict) else None
                    if isinstance(arguments, str):
                        chars += len(arguments)
            frames += chars > before
        if self._sampled and self._total > self._sampled:
            chars = chars * self._total // self._sampled
            frames = frames * self._total // self._sampled
        return relayed_tokens(chars, frames)

    @property
    def final(self) -> bool:
        """Whether the upstream's usage frame arrived (else the tokens are estimated from what was relayed)."""
        return self.prompt_tokens is not None

    def _read(self, frame: bytes) -> bool:
        """Take usage from one frame; True when it is a usage-only frame (one that may be kept back)."""
        start = frame.find(b"data:")
        if start < 0 or b'"usage"' not in frame:
            return False
        try:
            obj = orjson.loads(frame[start + 5 :].strip())
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        usage = obj.get("usage")
        if not isinstance(usage, dict) or type(usage.get("prompt_tokens")) is not int:
            return False
        self.prompt_tokens = usage["prompt_tokens"]
        completion = usage.get("completion_tokens")
        self.completion_tokens = completion if type(completion) is int else None
        self.classes = token_classes(usage)
        return obj.get("choices") == []
