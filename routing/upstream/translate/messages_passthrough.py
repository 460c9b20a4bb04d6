"""Anthropic Messages client -> Anthropic Messages upstream: the pass-through (docs/anthropic-messages.md#passthrough).

No translation either way: the client's body goes up with only `model` replaced
(routing.gateway.messages), the answer comes back as sent, and the event stream is only framed
for the commit rule of chat streams (`held_until_content`) and tapped for its usage
(`AnthropicRelay`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from routing.core.prices import token_classes
from routing.core.sse import json_event
from routing.core.stream import SAMPLE_BYTES, relayed_tokens
from routing.upstream.translate import shared
from routing.upstream.translate.shared import anthropic_usage, error_type, frames_of

_CONTENT_EVENTS = frozenset({b"content_block_delta", b"message_delta", b"message_stop"})
_END_EVENTS = frozenset({b"message_stop"})  # the clean end
_ERROR_EVENTS = frozenset({b"error"})


def _carries_content(name: bytes, data: bytes | None) -> bool:
    """Whether an Anthropic event is content for the commit: a delta, the stop, or a tool_use / non-empty text start."""
    if name in _CONTENT_EVENTS:
        return True
    if name != b"content_block_start" or data is None:
        return False
    try:
        block = orjson.loads(data).get("content_block") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return True
    return block.get("type") == "tool_use" or bool(block.get("text"))


def held_until_content(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An Anthropic upstream's event stream, framed for routing.core.stream's commit and relay
    (routing.upstream.translate.shared.held_until_content, with Anthropic's event names).

    The events before the first content (message_start, an empty text block start, pings) are held
    and sent with it, as a chunk of their own; an error event before it is a pre-commit failure
    (retried, failed over). After message_stop a `data: [DONE]` marker tells the relay the stream
    ended as it should (`AnthropicRelay` takes it out again); after an error event the stream just
    ends, so the relay counts it as broken (breaker, usage record) and its terminal frame is dropped
    by `AnthropicRelay`.
    """
    return shared.held_until_content(chunks, _carries_content, _ERROR_EVENTS, _END_EVENTS)


class AnthropicRelay:
    """The committed bytes of an Anthropic upstream's stream, as sent, for an Anthropic client.

    Takes out the `[DONE]` marker of `held_until_content`, turns the gateway's own terminal
    frame (`data: {"error": ...}`, when the stream breaks after its commit) into Anthropic's
    `event: error` (or drops it when the upstream's own error event was just relayed), and
    reads the token usage from message_start and message_delta.
    """

    __slots__ = (
        "prompt_tokens",
        "completion_tokens",
        "classes",
        "final",
        "_buf",
        "_errored",
        "_deltas",
        "_sample",
        "_sampled",
    )

    def __init__(self) -> None:
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None  # cache reads and writes (routing.core.prices)
        self.final = False  # message_delta's usage arrived: the tokens are the provider's final count
        self._buf = bytearray()
        self._errored = False
        self._deltas = 0  # content_block_delta frames relayed (docs/usage-records.md#partial)
        self._sample: list[bytes] = []  # their data, up to SAMPLE_BYTES, read only if the stream is cut
        self._sampled = 0

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for raw, name, data in frames_of(self._buf, chunk):  # as the pass-through read them
            if data == b"[DONE]":
                continue
            if name is None and data is not None and data.startswith(b'{"error"'):
                if self._errored:
                    continue
                self._errored = True
                try:
                    error = orjson.loads(data).get("error")
                except (orjson.JSONDecodeError, AttributeError):
                    error = None
                error = error if isinstance(error, dict) else {}
                message = str(error.get("message") or "the upstream stream failed; retry the request")
                out.append(
                    json_event("error", {"type": "error", "error": {"type": error_type(500), "message": message}})
                )
                continue
            if name == b"content_block_delta" and data is not None:
                self._deltas += 1
                if self._sampled < SAMPLE_BYTES:
                    self._sample.append(data)
                    self._sampled += len(data)
            elif name in (b"message_start", b"message_delta") and data is not None:
                self._usage(name, data)
            elif name == b"error":
                self._errored = True
            out.append(raw)
        return b"".join(out)

    def flush(self) -> bytes:
        return b""

    def _usage(self, name: bytes, data: bytes) -> None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        usage = (obj.get("message") or {}).get("usage") if name == b"message_start" else obj.get("usage")
        if not isinstance(usage, dict):
            return
        prompt, completion, _ = anthropic_usage(usage)
        if prompt is not None:
            self.prompt_tokens = prompt
            self.classes = token_classes(usage)  # message_start's (a message_delta may repeat them)
        if completion is not None:
            self.completion_tokens = completion
            self.final = self.final or name == b"message_delta"

    def estimated_completion_tokens(self) -> int:
        """The completion tokens relayed before a cut: message_start's `output_tokens` counts only
        the first; the text of the deltas at four characters a token, at least one a frame."""
        chars = 0
        for data in self._sample:
            try:
                delta = orjson.loads(data).get("delta")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(delta, dict):
                for key in ("text", "partial_json", "thinking"):
                    if isinstance(delta.get(key), str):
                        chars += len(delta[key])
        if len(self._sample) < self._deltas and self._sample:
            chars = chars * self._deltas // len(self._sample)
        return relayed_tokens(chars, self._deltas)
