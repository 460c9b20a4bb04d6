"""Responses client -> Responses upstream: the pass-through of an event stream (streaming `/v1/responses`, docs/api.md#responses).

An OpenAI (or Azure OpenAI) upstream streams `event: response.created`, `response.in_progress`,
`response.output_item.added`, ..., `*.delta`, `*.done` and `response.completed`, each with a
`sequence_number`. The gateway relays those bytes unchanged (the model name aside), with the
commit rule of chat streams (docs/resilience.md#r6): the events before the first content
(`response.created`, `response.in_progress`, the `*.added` events) are held, and an error or an
end before any content is retried or failed over. `response.completed` (or `.incomplete`) is
the stream's clean end; its `usage` is the request's token count.

`held_until_content` frames the upstream's events for routing.core.stream's commit and relay;
`ResponsesRelay` is the tap over the committed bytes (usage, and Responses' own `error` event
in place of the gateway's terminal frame when the stream breaks after its commit).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.core.prices import token_classes
from routing.core.sse import event_frame, event_name
from routing.core.stream import SAMPLE_BYTES, relayed_tokens
from routing.upstream.translate import shared
from routing.upstream.translate.shared import frames_of, usage_of

# Events that carry no content: held until the first that does (or until HOLD_MAX_EVENTS).
PREAMBLE_EVENTS = frozenset(
    {
        b"response.created",
        b"response.in_progress",
        b"response.queued",
        b"response.output_item.added",
        b"response.content_part.added",
        b"response.reasoning_summary_part.added",
        b"keepalive",
    }
)
END_EVENTS = frozenset({b"response.completed", b"response.incomplete"})  # a clean end
ERROR_EVENTS = frozenset({b"error", b"response.failed"})
DELTA_EVENTS = frozenset(
    {
        b"response.output_text.delta",
        b"response.function_call_arguments.delta",
        b"response.refusal.delta",
        b"response.reasoning_summary_text.delta",
        b"response.reasoning_text.delta",
        b"response.custom_tool_call_input.delta",
    }
)
_SEQUENCE = re.compile(rb'"sequence_number"[^:]*:[ \t]*([0-9]*)')
_LEADING = re.compile(rb"[ \t]*([0-9]*)")
CHARS_COUNTED = SAMPLE_BYTES * 4  # the deltas' characters a cut stream's estimate counts; past them, frames


def _carries_content(kind: bytes, _data: bytes | None) -> bool:
    """Whether a Responses event is content for the commit: any but the preamble's (an end or an error too)."""
    return kind not in PREAMBLE_EVENTS


def held_until_content(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The upstream's Responses events, unchanged, framed for the commit and relay
    (routing.upstream.translate.shared.held_until_content, with Responses' event names).

    Events before the first content are held and sent with it, as a chunk of their own when
    more of the stream came in the same read (the relay sends it before it taps the rest); an
    `error` or `response.failed` before it is a pre-commit failure (retried, failed over). After `response.completed` a
    `data: [DONE]` marker tells the relay the stream ended as it should (`ResponsesRelay` takes
    it out again); after an error event the stream just ends, so the relay counts it as broken.
    """
    return shared.held_until_content(chunks, _carries_content, ERROR_EVENTS, END_EVENTS)


class ResponsesRelay:
    """The committed bytes of a Responses event stream, as sent, and their token usage.

    Takes out the `[DONE]` marker of `held_until_content`; turns the gateway's own terminal
    frame (`data: {"error": ...}`, when the stream breaks after its commit) into Responses'
    `error` event with the next sequence number (or drops it when the upstream's own error
    event was just relayed); reads the usage from `response.completed`.

    Per event it does no more than it must on every stream: the frames come as the pass-through
    read them (routing.upstream.translate.shared.frames_of), and the deltas' text, which only a cut
    stream's estimate needs, is kept as received and decoded when asked for (or when SAMPLE_BYTES
    of it are kept), not as each delta goes by: a whole stream decodes only its `response.completed`.
    """

    __slots__ = (
        "prompt_tokens",
        "completion_tokens",
        "classes",
        "final",
        "_buf",
        "_errored",
        "_seq",
        "_chars",
        "_deltas",
        "_kept",
        "_kept_bytes",
    )

    def __init__(self) -> None:
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None
        self.final = False  # response.completed's usage arrived
        self._buf = bytearray()
        self._errored = False
        self._seq = -1  # the last sequence_number relayed
        # docs/usage-records.md#partial: the deltas' characters (counted up to CHARS_COUNTED) and frames
        self._chars = 0
        self._deltas = 0
        self._kept: list[bytes] = []  # the data of deltas not counted yet, in order
        self._kept_bytes = 0

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for raw, name, data in frames_of(self._buf, chunk):  # as the pass-through read them
            if data == b"[DONE]":
                continue
            if name is None and data is not None and data.startswith(b'{"error"'):
                if not self._errored:
                    self._errored = True
                    out.append(self._error_event(data))
                continue
            kind = name if name is not None else event_name(name, data)  # named: no call
            if data is not None:
                self._read(kind, data)
            if kind in ERROR_EVENTS:
                self._errored = True
            out.append(raw)
        return b"".join(out)

    def flush(self) -> bytes:
        return b""

    def _read(self, kind: bytes, data: bytes) -> None:
        if kind in DELTA_EVENTS:
            self._deltas += 1
            if self._chars < CHARS_COUNTED:
                self._kept.append(data)
                self._kept_bytes += len(data)
                if self._kept_bytes >= SAMPLE_BYTES:
                    self._count_kept()
        elif kind in END_EVENTS or kind == b"response.failed":
            try:
                response = orjson.loads(data).get("response")
            except (orjson.JSONDecodeError, AttributeError):
                response = None
            if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                self.prompt_tokens, self.completion_tokens = usage_of(response)
                self.classes = token_classes(response["usage"])
                self.final = self.prompt_tokens is not None
        seq = _sequence_number(data)
        if seq is not None:
            self._seq = seq

    def _count_kept(self) -> None:
        """Count the characters of the kept deltas' text, in order, until CHARS_COUNTED are."""
        for data in self._kept:
            if self._chars >= CHARS_COUNTED:
                break
            try:
                delta = orjson.loads(data).get("delta")
            except (orjson.JSONDecodeError, AttributeError):
                delta = None
            self._chars += len(delta) if isinstance(delta, str) else 0
        self._kept.clear()
        self._kept_bytes = 0

    def _error_event(self, data: bytes) -> bytes:
        try:
            error = orjson.loads(data).get("error")
        except (orjson.JSONDecodeError, AttributeError):
            error = None
        error = error if isinstance(error, dict) else {}
        self._seq += 1
        payload: dict[str, Any] = {
            "type": "error",
            "code": error.get("code") or "upstream_stream_error",
            "message": str(error.get("message") or "the upstream stream failed; retry the request"),
            "param": None,
            "sequence_number": self._seq,
        }
        return event_frame(b"error", orjson.dumps(payload))

    def estimated_completion_tokens(self) -> int:
        """The completion tokens relayed before a cut: the deltas' text at four characters a token."""
        self._count_kept()
        return relayed_tokens(self._chars, self._deltas)


def _sequence_number(data: bytes) -> int | None:
    """The `sequence_number` of an event's data, read without parsing the (possibly large) object:
    the digits after the first `"sequence_number"` and the `:` that follows it (one C-level search)."""
    match = _SEQUENCE.search(data)
    if match is not None:
        digits = match.group(1)
    else:  # no key, or no `:` after it (not JSON): the digits the data starts with, as ever
        digits = _LEADING.match(data).group(1) if b'"sequence_number"' in data else b""  # type: ignore[union-attr]
    return int(digits) if digits else None


__all__ = ["ResponsesRelay", "held_until_content"]
