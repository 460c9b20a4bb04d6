"""Every translation between Anthropic's Messages API and the OpenAI chat shape, both ways.

The gateway's internal chat shape is OpenAI's. Two users of this module:

* the `anthropic` dialect (OpenAI-shaped request -> Anthropic upstream, and its
  answer / SSE events back to chat.completion / chat.completion.chunk), and
* the `/v1/messages` endpoint (an Anthropic client's request -> the internal chat
  shape, and the chat answer / chunk stream back to Anthropic's message / events),
  docs/anthropic-messages.md.

Both directions share the stop-reason tables, the tool-call <-> tool_use and
image <-> image_url helpers and the SSE frame splitter, so a field is mapped the
same way whichever way it travels. Non-2xx upstream bodies are left to
routing.core.errors (529 overloaded is a 5xx).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.errors import GatewayError, invalid_request
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.prices import token_classes
from routing.core.stream import SAMPLE_BYTES, relayed_tokens
from routing.upstream.dialects import anthropic_structured, openai_request
from routing.upstream.dialects.anthropic_structured import STRUCTURED_TOOL

# --- shared tables and helpers -----------------------------------------------------

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI clients often omit it

# Anthropic stop_reason -> OpenAI finish_reason ...
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
# ... and back. A "stop" whose choice names the matched string in `stop_reason` (vLLM's
# convention, which the anthropic dialect follows) was a stop sequence.
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's error types by HTTP status (docs/anthropic-messages.md#errors).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
KNOWN_ERROR_TYPES = frozenset(ERROR_TYPES.values()) | {"timeout_error"}


def error_type(status: int, upstream_type: Any = None) -> str:
    """Anthropic's `error.type` for a gateway status; an upstream's own Anthropic type is kept."""
    if isinstance(upstream_type, str) and upstream_type in KNOWN_ERROR_TYPES:
        return upstream_type
    found = ERROR_TYPES.get(status)
    if found is not None:
        return found
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(status: int, message: str, upstream_type: Any = None, request_id: str | None = None) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}`, the body of every Anthropic error."""
    out: dict[str, Any] = {"type": "error", "error": {"type": error_type(status, upstream_type), "message": message}}
    if request_id:
        out["request_id"] = request_id
    return orjson.dumps(out)


def stop_of(choice: dict[str, Any]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of an OpenAI choice."""
    finish = choice.get("finish_reason")
    matched = choice.get("stop_reason")
    if finish == "stop" and isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return STOP_REASONS.get(finish or "stop", "end_turn"), None


def image_url_of(block: dict[str, Any], param: str) -> str:
    """An Anthropic image block's source as an OpenAI image_url (a data: URI for base64)."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise invalid_request(f"{param}.source must be an object", f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise invalid_request(f"{param}.source needs string media_type and data", f"{param}.source")
        return f"data:{media};base64,{data}"
    if kind == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise invalid_request(f"{param}.source.type must be base64 or url (with its fields)", f"{param}.source")


def tool_use_of(call: Any, param: str) -> dict[str, Any]:
    """An OpenAI tool call as an Anthropic tool_use block (arguments parsed to `input`)."""
    call_id, name, args = openai_request.function_call(call, param)
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def tool_call_of(block: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool_use block as an OpenAI tool call (input serialised to `arguments`)."""
    return {
        "id": block.get("id", ""),
        "type": "function",
        "function": {"name": block.get("name", ""), "arguments": orjson.dumps(block.get("input") or {}).decode()},
    }


def sse_frames(buffer: bytearray) -> list[tuple[bytes, bytes | None, bytes | None]]:
    """Pop every complete SSE frame from a (normalised) buffer: (raw frame, event name, joined data)."""
    out = []
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return out
        raw = bytes(buffer[: end + 2])
        del buffer[: end + 2]
        name = None
        data = []
        for line in raw[:-2].split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip()
        if data or name:
            out.append((raw, name, b"\n".join(data) if data else None))


def sse_events(buffer: bytearray) -> list[tuple[bytes | None, bytes]]:
    """Pop every complete SSE event that carries data: (event name, joined `data:` payload)."""
    return [(name, data) for _, name, data in sse_frames(buffer) if data is not None]


def _normalised(buffer: bytearray, chunk: bytes) -> None:
    """Append `chunk` with its line ends made \\n, even when a \\r\\n is split across chunks."""
    buffer += chunk
    if b"\r" in buffer:
        data = bytes(buffer)
        held = data.endswith(b"\r")  # may be the first half of \r\n
        data = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer[:] = data + b"\r" if held else data


# --- OpenAI chat request -> Anthropic upstream request (the anthropic dialect) --------
# The OpenAI fields are read and checked by routing.upstream.dialects.openai_request, as for
# every other translated provider; this part only builds Anthropic's blocks.


def _image_block(part: dict[str, Any], param: str) -> dict[str, Any]:
    media_type, data = openai_request.image_source(part, param)
    if media_type is not None:
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": data}}


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """User/assistant content (string or parts) as Anthropic content blocks."""
    blocks = []
    for i, part in enumerate(openai_request.content_list(content, param)):
        p = f"{param}[{i}]"
        if isinstance(part, str):
            blocks.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise invalid_request(f"{p} must be a content part object", p)
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            blocks.append(_image_block(part, p))
        else:
            raise invalid_request(
                f"{p}: content part type {kind!r} cannot be sent to this model's provider; send text and image_url parts",
                p,
            )
    return blocks


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add a turn, merging with the previous one of the same role (Anthropic alternates roles)."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _tool_result(msg: dict[str, Any], text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": str(msg.get("tool_call_id", "")), "content": text}


def translate_messages(raw: Any) -> tuple[str | None, list[dict[str, Any]]]:
    system, turns = openai_request.chat_turns(raw, _blocks, tool_use_of, _tool_result)
    messages: list[dict[str, Any]] = []
    for role, blocks in turns:
        _append(messages, "assistant" if role == "assistant" else "user", blocks)
    return system, messages


def translate_tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for fn in openai_request.function_tools(tools):
        spec: dict[str, Any] = {
            "name": fn["name"],
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            spec["description"] = fn["description"]
        out.append(spec)
    return out


def translate_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    read = openai_request.tool_choice_of(choice)
    if read is None:
        result: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif read[0] == "none":
        return {"type": "none"}
    elif read[0] == "function":
        result = {"type": "tool", "name": read[1]}
    else:
        result = {"type": "any" if read[0] == "required" else "auto"}
    if result is not None and parallel is False:
        result["disable_parallel_tool_use"] = True
    return result


def anthropic_request(
    body: dict[str, Any], upstream_model: str, stream: bool, max_output_tokens: int | None = None
) -> dict[str, Any]:
    """The Anthropic Messages body for an OpenAI chat body (structured output and reasoning: anthropic_structured)."""
    system, messages = translate_messages(body.get("messages"))
    max_tokens = openai_request.max_tokens_of(body) or DEFAULT_MAX_TOKENS
    out: dict[str, Any] = {"model": upstream_model, "max_tokens": max_tokens, "messages": messages}
    if system:
        out["system"] = system
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = openai_request.stop_sequences(stop)
    if body.get("tools"):
        out["tools"] = translate_tools(body["tools"])
    choice = translate_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None and "tools" in out:
        out["tool_choice"] = choice
    if isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}
    anthropic_structured.apply(body, out, max_output_tokens)
    if stream:
        out["stream"] = True
    return out


# --- Anthropic answer -> chat.completion (the anthropic dialect) ----------------------


def anthropic_usage(raw: Any) -> tuple[int | None, int | None, dict[str, Any] | None]:
    """(prompt tokens, completion tokens, OpenAI usage object) of an Anthropic usage object."""
    if not isinstance(raw, dict):
        return None, None, None
    inp, out = raw.get("input_tokens"), raw.get("output_tokens")
    cached = raw.get("cache_read_input_tokens") or 0
    created = raw.get("cache_creation_input_tokens") or 0
    prompt = inp + cached + created if type(inp) is int else None
    completion = out if type(out) is int else None
    openai_usage = {
        "prompt_tokens": prompt or 0,
        "completion_tokens": completion or 0,
        "total_tokens": (prompt or 0) + (completion or 0),
    }
    if cached:
        openai_usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if created:  # cache writes have no OpenAI field: Anthropic's own, so they are priced as such
        openai_usage["cache_read_input_tokens"] = cached
        openai_usage["cache_creation_input_tokens"] = created
        if isinstance(raw.get("cache_creation"), dict):
            openai_usage["cache_creation"] = raw["cache_creation"]
    return prompt, completion, openai_usage


def _finish_choice(choice: dict[str, Any], stop_reason: Any, stop_sequence: Any) -> dict[str, Any]:
    """Set finish_reason from an Anthropic stop_reason; a stop sequence is named in `stop_reason`."""
    choice["finish_reason"] = FINISH_REASONS.get(stop_reason or "", "stop")
    if stop_reason == "stop_sequence" and isinstance(stop_sequence, str):
        choice["stop_reason"] = stop_sequence
    return choice


def chat_completion_of(data: dict[str, Any], default_model: str) -> tuple[dict[str, Any], int | None, int | None]:
    """(chat.completion, prompt tokens, completion tokens) for an Anthropic message."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    stop_reason = data.get("stop_reason")
    for block in data.get("content") or ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thoughts.append(str(block.get("thinking") or ""))
        elif kind == "tool_use" and block.get("name") == STRUCTURED_TOOL:  # the requested schema's answer
            texts = [orjson.dumps(block.get("input") or {}).decode()]
        elif kind == "tool_use":
            calls.append(tool_call_of(block))
    if stop_reason == "tool_use" and not calls:
        stop_reason = "end_turn"  # only the structured answer was "called"
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    prompt, completion, openai_usage = anthropic_usage(data.get("usage"))
    choice = _finish_choice({"index": 0, "message": message}, stop_reason, data.get("stop_sequence"))
    choice["logprobs"] = None
    out: dict[str, Any] = {
        "id": data.get("id", ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": data.get("model") or default_model,
        "choices": [choice],
    }
    if openai_usage is not None:
        out["usage"] = openai_usage
    return out, prompt, completion


# --- Anthropic SSE events -> chat.completion.chunk frames (the anthropic dialect) -----

DONE = b"data: [DONE]\n\n"


class _ChunkState:
    """Per-stream translation state: ids, the pending role, tool-call index mapping."""

    __slots__ = ("head", "role_sent", "tools", "prompt", "completion", "structured")

    def __init__(self, upstream_model: str) -> None:
        self.head: dict[str, Any] = {
            "id": "",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": upstream_model,
        }
        self.role_sent = False
        self.tools: dict[int, int] = {}  # anthropic block index -> openai tool_calls index
        self.prompt: int | None = None
        self.completion: int | None = None
        self.structured: int | None = None  # the block index of the structured-output tool (anthropic_structured)

    def block_delta(self, event: dict[str, Any]) -> bytes | None:
        """A content block's delta as a chunk: text and the structured answer as content, thinking as
        reasoning_content, a tool's input as its call's arguments."""
        delta = event.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta":
            return self.frame({"content": delta.get("text", "")})
        if dtype == "thinking_delta":
            return self.frame({"reasoning_content": delta.get("thinking", "")})
        if dtype != "input_json_delta":
            return None  # signature deltas: no place in the chat shape
        if self.structured is not None and event.get("index") == self.structured:
            return self.frame({"content": delta.get("partial_json", "")})
        index = self.tools.get(event.get("index", -1))
        if index is None:
            return None
        return self.frame({"tool_calls": [{"index": index, "function": {"arguments": delta.get("partial_json", "")}}]})

    def block_start(self, event: dict[str, Any]) -> bytes | None:
        block = event.get("content_block") or {}
        if block.get("type") == "tool_use" and block.get("name") == STRUCTURED_TOOL:
            self.structured = event.get("index", -1)
            return None
        if block.get("type") == "tool_use":
            index = self.tools[event.get("index", len(self.tools))] = len(self.tools)
            call = {
                "index": index,
                "id": block.get("id", ""),
                "type": "function",
                "function": {"name": block.get("name", ""), "arguments": ""},
            }
            return self.frame({"tool_calls": [call]})
        if block.get("type") == "text" and block.get("text"):
            return self.frame({"content": block["text"]})
        return None

    def finish(self, delta: dict[str, Any]) -> dict[str, Any]:
        """The message_delta's stop: a tool_use stop that only "called" the structured answer is a plain stop."""
        if delta.get("stop_reason") == "tool_use" and not self.tools and self.structured is not None:
            return {**delta, "stop_reason": "end_turn"}
        return delta

    def frame(
        self, delta: dict[str, Any], finish: dict[str, Any] | None = None, usage: dict[str, Any] | None = None
    ) -> bytes:
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        if finish is not None:
            _finish_choice(choice, finish.get("stop_reason"), finish.get("stop_sequence"))
        chunk = {**self.head, "choices": [choice]}
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _error_frame(error: Any) -> bytes:
    if not isinstance(error, dict):
        error = {"type": "api_error", "message": str(error)}
    payload = {
        "error": {
            "message": str(error.get("message") or "the upstream stream reported an error"),
            "type": str(error.get("type") or "api_error"),
            "code": "upstream_stream_error",
            "param": None,
        }
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def translate_sse(chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
    """Anthropic SSE events -> OpenAI chat.completion.chunk frames, `[DONE]` on message_stop.

    The role is sent with the first content delta (not on message_start), so an error
    right after message_start is still the stream's first frame: a pre-commit failure.
    A stream that ends without message_stop ends without `[DONE]` (the stream layer
    reports it). The finish chunk carries `usage`.
    """
    state = _ChunkState(model.upstream_model)
    buffer = bytearray()
    async for chunk in chunks:
        _normalised(buffer, chunk)
        for _, payload in sse_events(buffer):
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError:
                yield _error_frame(
                    {"type": "invalid_stream", "message": "the upstream sent an SSE event that is not JSON"}
                )
                return
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == "content_block_delta" or kind == "content_block_start":
                out = state.block_delta(event) if kind == "content_block_delta" else state.block_start(event)
                if out is not None:
                    yield out
            elif kind == "message_start":
                message = event.get("message") or {}
                state.head["id"] = message.get("id", "")
                if message.get("model"):
                    state.head["model"] = message["model"]
                state.prompt, _, _ = anthropic_usage(message.get("usage"))
            elif kind == "message_delta":
                usage = event.get("usage") or {}
                if type(usage.get("output_tokens")) is int:
                    state.completion = usage["output_tokens"]
                if type(usage.get("input_tokens")) is int and state.prompt is None:
                    state.prompt = usage["input_tokens"]
                prompt, completion = state.prompt or 0, state.completion or 0
                totals = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                yield state.frame({}, state.finish(event.get("delta") or {}), totals)
            elif kind == "message_stop":
                yield DONE
                return
            elif kind == "error":
                yield _error_frame(event.get("error"))
                return
            # ping, content_block_stop, signature deltas: nothing to relay


# --- Anthropic client request -> OpenAI chat request (the /v1/messages endpoint) ------

# How a translated (non-Anthropic) link treats each top-level field of a Messages request: mapped to
# a chat field, or a hint it can do without (dropped, and named in the answer's x-switchboard-dropped).
# Any other field has no counterpart: such a link refuses the request naming it (docs/anthropic-messages.md).
MAPPED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "tools",
        "tool_choice",
        "output_config",
    }
)
HINT_FIELDS = frozenset({"thinking", "context_management", "cache_control", "service_tier"})
# Blocks of earlier assistant turns that carry nothing another model can use.
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class Gaps:
    """What a translated link cannot carry of one Messages request, found while translating it.

    A passthrough link needs none of this (it gets the client's own body), so nothing here is
    refused at once: `dropped` are hints a translated link goes without, `refused` the fields it
    cannot serve at all, (param, what) in request order; routing.gateway.messages.Shape refuses
    the request on such a link only.
    """

    __slots__ = ("dropped", "refused")

    def __init__(self) -> None:
        self.dropped: list[str] = []
        self.refused: list[tuple[str, str]] = []

    def drop(self, name: str) -> None:
        if name not in self.dropped:
            self.dropped.append(name)

    def refuse(self, param: str, what: str) -> None:
        self.refused.append((param, what))


def _string(value: Any, param: str, what: str = "a string") -> str:
    if not isinstance(value, str):
        raise invalid_request(f"{param} must be {what}", param)
    return value


def _text_blocks(content: Any, param: str, gaps: Gaps | None = None) -> str:
    """A string, or a list of text blocks, as one string (system, system turns, tool results)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"{param} must be a string or a list of text blocks", param)
    texts = []
    for i, block in enumerate(content):
        p = f"{param}[{i}]"
        if not isinstance(block, dict):
            raise invalid_request(f"{p} must be a content block object", p)
        if gaps is not None and block.get("cache_control") is not None:
            gaps.drop("cache_control")
        if block.get("type") == "text":
            texts.append(_string(block.get("text"), f"{p}.text"))
        elif block.get("type") != "image":  # images in tool results are dropped (docs/anthropic-messages.md)
            raise invalid_request(f"{p}.type must be text", f"{p}.type")
    return "\n".join(texts)


class _Turn:
    """The OpenAI pieces of one Anthropic turn, as its blocks are read."""

    __slots__ = ("role", "parts", "calls", "results")

    def __init__(self, role: str) -> None:
        self.role = role
        self.parts: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []

    def messages(self) -> list[dict[str, Any]]:
        """Tool results first (as tool messages), then the rest of the turn."""
        parts = self.parts
        if self.role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": "".join(p["text"] for p in parts) or None}
            if self.calls:
                out["tool_calls"] = self.calls
            return [out]
        if parts:
            only_text = len(parts) == 1 and parts[0]["type"] == "text"
            self.results.append({"role": "user", "content": parts[0]["text"] if only_text else parts})
        return self.results


def _block(block: Any, p: str, turn: _Turn, gaps: Gaps) -> None:
    """Read one content block into `turn`; a block another API cannot carry is noted in `gaps`."""
    if not isinstance(block, dict):
        raise invalid_request(f"{p} must be a content block object", p)
    kind = block.get("type")
    if not isinstance(kind, str):  # a list or object here is not a block type (and is unhashable)
        raise invalid_request(f"{p}.type must be a string: text, image, tool_use, tool_result or thinking", f"{p}.type")
    role = turn.role
    if block.get("cache_control") is not None:
        gaps.drop("cache_control")
    if kind == "text":
        turn.parts.append({"type": "text", "text": _string(block.get("text"), f"{p}.text")})
    elif kind == "image" and role == "user":
        if not isinstance(block.get("source"), dict):
            raise invalid_request(f"{p}.source must be an object", f"{p}.source")
        try:
            turn.parts.append({"type": "image_url", "image_url": {"url": image_url_of(block, p)}})
        except GatewayError as exc:  # e.g. a Files API source: an Anthropic upstream takes it
            gaps.refuse(exc.param or p, "an image source other than base64 or url")
    elif kind == "tool_use" and role == "assistant":
        _string(block.get("id"), f"{p}.id")
        _string(block.get("name"), f"{p}.name")
        if not isinstance(block.get("input", {}), dict):
            raise invalid_request(f"{p}.input must be an object", f"{p}.input")
        turn.calls.append(tool_call_of(block))
    elif kind == "tool_result" and role == "user":
        if block.get("is_error") is True:
            gaps.drop("tool_result.is_error")
        turn.results.append(
            {
                "role": "tool",
                "tool_call_id": _string(block.get("tool_use_id"), f"{p}.tool_use_id"),
                "content": _text_blocks(block.get("content"), f"{p}.content", gaps),
            }
        )
    elif kind in _DROPPED_BLOCKS:
        gaps.drop("thinking")
    else:
        gaps.refuse(f"{p}.type", f"a {kind!r} block in a {role} turn")


def _turn(msg: Any, param: str, gaps: Gaps) -> list[dict[str, Any]]:
    """One Anthropic turn as OpenAI messages; a `system` turn (Claude Code sends them) is a system message."""
    if not isinstance(msg, dict):
        raise invalid_request(f"{param} must be an object with role and content", param)
    role = msg.get("role")
    if role not in ("user", "assistant", "system"):
        raise invalid_request(f"{param}.role must be 'user', 'assistant' or 'system'", f"{param}.role")
    content = msg.get("content")
    if role == "system":
        return [{"role": "system", "content": _text_blocks(content, f"{param}.content", gaps)}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise invalid_request(f"{param}.content must be a string or a list of content blocks", f"{param}.content")
    turn = _Turn(role)
    refused = len(gaps.refused)
    for j, block in enumerate(content):
        _block(block, f"{param}.content[{j}]", turn, gaps)
    # a turn of blocks only an Anthropic upstream takes: still a turn, for routing and preflight
    return turn.messages() or ([{"role": role, "content": ""}] if len(gaps.refused) > refused else [])


def chat_tools(tools: Any, gaps: Gaps | None = None) -> list[dict[str, Any]]:
    """Anthropic custom tools as OpenAI function tools; a server tool (no input_schema) has no counterpart."""
    if not isinstance(tools, list):
        raise invalid_request("tools must be a list of tool objects", "tools")
    gaps = gaps if gaps is not None else Gaps()
    out = []
    for i, tool in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid_request(f"{p} must be an object", p)
        name = _string(tool.get("name"), f"{p}.name")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            gaps.refuse(f"{p}.input_schema", f"the server tool {tool.get('type')!r}")
            continue
        if tool.get("cache_control") is not None:
            gaps.drop("cache_control")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if tool.get("description") is not None:
            fn["description"] = _string(tool["description"], f"{p}.description")
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> tuple[Any, bool]:
    """(OpenAI tool_choice, parallel tool calls allowed) for an Anthropic tool_choice."""
    if not isinstance(choice, dict):
        raise invalid_request("tool_choice must be an object with a type", "tool_choice")
    kind = choice.get("type")
    parallel = choice.get("disable_parallel_tool_use") is not True
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool":
        name = _string(choice.get("name"), "tool_choice.name")
        return {"type": "function", "function": {"name": name}}, parallel
    raise invalid_request("tool_choice.type must be auto, any, tool or none", "tool_choice.type")


def _output_config(config: Any, out: dict[str, Any], gaps: Gaps) -> None:
    """`output_config`: its JSON schema `format` is chat's `response_format`; `effort` is a hint."""
    if not isinstance(config, dict):
        raise invalid_request("output_config must be an object", "output_config")
    for key, value in config.items():
        if key == "format" and isinstance(value, dict) and value.get("type") == "json_schema":
            schema = {"name": "output", "schema": value.get("schema") or {}}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif key == "effort":
            gaps.drop("output_config.effort")
        elif value is not None:
            gaps.refuse(f"output_config.{key}", "this output setting")


def _top_level(body: dict[str, Any], out: dict[str, Any], gaps: Gaps) -> None:
    """The fields besides messages and system, mapped, dropped as hints or noted as having no counterpart."""
    for name in ("max_tokens", "temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = body[name]
    stops = body.get("stop_sequences")
    if stops:
        out["stop"] = [_string(s, f"stop_sequences[{i}]") for i, s in enumerate(stops)]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id") is not None:
        out["user"] = _string(metadata["user_id"], "metadata.user_id")
    if body.get("tools"):
        out["tools"] = chat_tools(body["tools"], gaps) or None
        if out["tools"] is None:
            del out["tools"]
    if body.get("tool_choice") is not None:
        choice, parallel = chat_tool_choice(body["tool_choice"])
        out["tool_choice"] = choice
        if not parallel:
            out["parallel_tool_calls"] = False
    if body.get("output_config") is not None:
        _output_config(body["output_config"], out, gaps)
    for name, value in body.items():
        if name in MAPPED_FIELDS or value is None:
            continue
        if name in HINT_FIELDS:
            gaps.drop(name)
        else:
            gaps.refuse(name, "this field")


def chat_request(body: dict[str, Any], gaps: Gaps | None = None) -> dict[str, Any]:
    """The internal (OpenAI chat) body for an Anthropic Messages body whose top-level types are checked.

    With `gaps`, what the chat shape cannot carry is noted there (the caller decides per link);
    without, the first such field is refused at once, a 400 naming it.
    """
    noted = gaps if gaps is not None else Gaps()
    messages: list[dict[str, Any]] = []
    system = _text_blocks(body.get("system"), "system", noted)
    if system:
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise invalid_request("messages must be a list of message objects", "messages")
    for i, msg in enumerate(raw):
        messages.extend(_turn(msg, f"messages[{i}]", noted))
    out: dict[str, Any] = {"messages": messages}
    if body.get("model") is not None:
        out["model"] = body["model"]
    _top_level(body, out, noted)
    if body.get("stream") is True:
        out["stream"] = True
    if gaps is None and noted.refused:
        param, what = noted.refused[0]
        raise invalid_request(f"{param}: {what} cannot be translated to the chat shape", param)
    return out


# --- chat.completion -> Anthropic message (the /v1/messages endpoint) -----------------


def _lenient_tool_use(call: Any, index: int) -> dict[str, Any]:
    """An upstream's tool call as tool_use; arguments that are not JSON are kept under `_raw`."""
    try:
        return tool_use_of(call, f"tool_calls[{index}]")
    except Exception:  # noqa: BLE001 - the model's output, not the client's request
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        raw = fn.get("arguments")
        return {
            "type": "tool_use",
            "id": str(call.get("id", "") if isinstance(call, dict) else ""),
            "name": str(fn.get("name", "")),
            "input": {"_raw": raw if isinstance(raw, str) else ""},
        }


def message_usage(usage: Any) -> dict[str, int]:
    """Anthropic usage for an OpenAI usage object (cached prompt tokens as cache reads)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    prompt = prompt if type(prompt) is int else 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    out = {"input_tokens": prompt, "output_tokens": completion if type(completion) is int else 0}
    if type(cached) is int and 0 < cached <= prompt:
        out["input_tokens"] = prompt - cached
        out["cache_read_input_tokens"] = cached
    return out


def message_of(data: Any, fallback_id: str = "") -> dict[str, Any]:
    """The Anthropic message for an OpenAI chat.completion (the first choice)."""
    data = data if isinstance(data, dict) else {}
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict) and isinstance(p.get("text"), str))
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append({"type": "text", "text": refusal})
    for i, call in enumerate(message.get("tool_calls") or ()):
        content.append(_lenient_tool_use(call, i))
    stop_reason, stop_sequence = stop_of(choice)
    return {
        "id": str(data.get("id") or fallback_id),
        "type": "message",
        "role": "assistant",
        "model": str(data.get("model") or ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": message_usage(data.get("usage")),
    }


# --- chat.completion.chunk stream -> Anthropic events (the /v1/messages endpoint) -----


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


PING = event("ping", {"type": "ping"})


class MessagesStream:
    """Turns a committed OpenAI chunk stream into Anthropic's event sequence, frame by frame.

    message_start (and one ping) go out with the first frame; text deltas open a text
    block, each tool call its own tool_use block (its argument pieces as input_json_delta);
    a new block closes the open one. The finish reason and the usage frame are remembered
    and sent in message_delta when `[DONE]` arrives, followed by message_stop. An error
    frame (the upstream's, or the gateway's terminal frame after a commit) becomes one
    `event: error`; nothing follows it. Reads the token usage like routing.core.stream.UsageTap.
    """

    __slots__ = (
        "prompt_tokens",
        "completion_tokens",
        "_id",
        "_buf",
        "_started",
        "_block",
        "_kind",
        "_next",
        "_tools",
        "_stop",
        "_seq",
        "_ended",
        "_chars",
        "_frames",
        "classes",
    )

    def __init__(self, message_id: str = "") -> None:
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None
        # text relayed, for the estimate of a stream cut before its usage (docs/usage-records.md#partial)
        self._chars = 0
        self._frames = 0
        self._id = message_id
        self._buf = bytearray()
        self._started = False
        self._block = -1  # index of the open content block, -1 when none is open
        self._kind = ""  # "text" or "tool_use" for the open block
        self._next = 0
        self._tools: dict[int, int] = {}  # OpenAI tool_calls index -> content block index
        self._stop = "end_turn"
        self._seq: str | None = None
        self._ended = False

    def feed(self, chunk: bytes) -> bytes:
        """The Anthropic event bytes for `chunk` (complete frames only)."""
        if self._ended:
            return b""
        _normalised(self._buf, chunk)
        out: list[bytes] = []
        for _, payload in sse_events(self._buf):
            self._frame(payload, out)
            if self._ended:
                break
        return b"".join(out)

    def flush(self) -> bytes:
        """The end of the stream: an error event if it ended without `[DONE]` or an error."""
        if self._ended:
            return b""
        out: list[bytes] = []
        self._error({"message": "the upstream stream ended unexpectedly; retry the request"}, out)
        return b"".join(out)

    def _frame(self, payload: bytes, out: list[bytes]) -> None:
        if payload == b"[DONE]":
            self._finish(out)
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error") is not None:
            self._error(obj["error"], out)
            return
        self._start(obj, out)
        usage = obj.get("usage")
        if isinstance(usage, dict) and type(usage.get("prompt_tokens")) is int:
            self.prompt_tokens = usage["prompt_tokens"]
            completion = usage.get("completion_tokens")
            self.completion_tokens = completion if type(completion) is int else None
            self.classes = token_classes(usage)
        for choice in obj.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, out)

    def _choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "refusal"):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    if self._kind != "text":
                        self._open({"type": "text", "text": ""}, "text", out)
                    self._delta({"type": "text_delta", "text": text}, self._block, out)
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                index = call.get("index", 0)
                fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                block = self._tools.get(index)
                if block is None:
                    tool = {"type": "tool_use", "id": call.get("id") or f"toolu_{index}", "name": fn.get("name") or ""}
                    block = self._tools[index] = self._open({**tool, "input": {}}, "tool_use", out)
                args = fn.get("arguments")
                if isinstance(args, str) and args:
                    self._delta({"type": "input_json_delta", "partial_json": args}, block, out)
        if choice.get("finish_reason"):
            self._stop, self._seq = stop_of(choice)

    def _start(self, obj: dict[str, Any], out: list[bytes]) -> None:
        if self._started:
            return
        self._started = True
        message = {
            "id": str(obj.get("id") or self._id),
            "type": "message",
            "role": "assistant",
            "model": str(obj.get("model") or ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        out.append(event("message_start", {"type": "message_start", "message": message}))
        out.append(PING)

    def _open(self, block: dict[str, Any], kind: str, out: list[bytes]) -> int:
        self._close(out)
        self._block, self._kind = self._next, kind
        self._next += 1
        out.append(
            event("content_block_start", {"type": "content_block_start", "index": self._block, "content_block": block})
        )
        return self._block

    @property
    def final(self) -> bool:
        """Whether the upstream's usage arrived (else the tokens are estimated from what was relayed)."""
        return self.prompt_tokens is not None

    def estimated_completion_tokens(self) -> int:
        """The completion tokens relayed so far (docs/usage-records.md#partial)."""
        return relayed_tokens(self._chars, self._frames)

    def _delta(self, delta: dict[str, Any], index: int, out: list[bytes]) -> None:
        self._chars += len(delta.get("text") or delta.get("partial_json") or "")
        self._frames += 1
        out.append(event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))

    def _close(self, out: list[bytes]) -> None:
        if self._block >= 0:
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": self._block}))
            self._block, self._kind = -1, ""

    def _finish(self, out: list[bytes]) -> None:
        self._start({}, out)
        self._close(out)
        usage: dict[str, int] = {"output_tokens": self.completion_tokens or 0}
        if self.prompt_tokens is not None:
            usage["input_tokens"] = self.prompt_tokens
        delta = {"stop_reason": self._stop, "stop_sequence": self._seq}
        out.append(event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(event("message_stop", {"type": "message_stop"}))
        self._ended = True

    def _error(self, error: Any, out: list[bytes]) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or "the upstream stream failed; retry the request")
        kind = error_type(500, error.get("type"))
        out.append(event("error", {"type": "error", "error": {"type": kind, "message": message}}))
        self._ended = True


# --- Anthropic upstream -> Anthropic client, unchanged (the /v1/messages passthrough) ---

HOLD_MAX_EVENTS = 16  # events without content held before the commit (as routing.core.stream does)
_CONTENT_EVENTS = frozenset({b"content_block_delta", b"message_delta", b"message_stop"})
_END_EVENTS = frozenset({b"message_stop", b"error"})


def _event_name(name: bytes | None, data: bytes | None) -> bytes:
    if name is not None or data is None:
        return name or b""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return b""
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind.encode() if isinstance(kind, str) else b""


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


async def held_until_content(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An Anthropic upstream's event stream, framed for routing.core.stream's commit and relay.

    The events go through unchanged (line ends made \\n), but those before the first
    content (message_start, an empty text block start, pings) are held and sent with it,
    so the stream commits where a chat stream does; an error event before it is raised as
    a pre-commit failure (retried, failed over). After message_stop a `data: [DONE]`
    marker tells the relay the stream ended as it should (`AnthropicRelay` takes it out
    again); after an error event the stream just ends, so the relay counts it as broken
    (breaker, usage record) and its terminal frame is dropped by `AnthropicRelay`.
    """
    buffer = bytearray()
    held: list[bytes] | None = []
    async for chunk in chunks:
        _normalised(buffer, chunk)
        out: list[bytes] = []
        for raw, name, data in sse_frames(buffer):
            kind = _event_name(name, data)
            if held is not None:
                if kind == b"error":
                    detail = data.decode("utf-8", "replace")[:300] if data else ""
                    raise UpstreamFailure(
                        FailureKind.STREAM_ERROR, f"the upstream stream started with an error: {detail}", body=data
                    )
                held.append(raw)
                if not (_carries_content(kind, data) or len(held) > HOLD_MAX_EVENTS):
                    continue
                out.extend(held)
                held = None
            else:
                out.append(raw)
            if kind in _END_EVENTS:
                if kind == b"message_stop":
                    out.append(DONE)
                yield b"".join(out)
                return
        if out:
            yield b"".join(out)


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
        _normalised(self._buf, chunk)
        out: list[bytes] = []
        for raw, name, data in sse_frames(self._buf):
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
                out.append(event("error", {"type": "error", "error": {"type": error_type(500), "message": message}}))
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
