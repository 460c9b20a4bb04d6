"""Anthropic Messages API behind the OpenAI Chat Completions shape (chat only).

Requests: system messages become `system`, image_url parts become image blocks,
assistant tool_calls become tool_use blocks, tool messages become user tool_result
blocks, OpenAI function tools become Anthropic tools. Answers and SSE streams are
translated back to chat.completion / chat.completion.chunk, so clients never see
the difference. Non-2xx bodies are left to routing.core.errors (529 overloaded is a 5xx).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from providers.dialects.base import (
    Dialect,
    ParsedResponse,
    PreparedRequest,
    encode,
    join_url,
    load_json,
    unsupported,
)
from routing.config.snapshot import ModelSpec
from routing.core.errors import invalid_request

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI clients often omit it

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}


# --- request -------------------------------------------------------------------------


def _text_of(content: Any, param: str) -> str:
    """A system/tool message's content (string or text parts) as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    raise invalid_request(f"{param} must be a string or a list of content parts", param)


def _image_block(part: dict[str, Any], param: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise invalid_request(f"{param}.image_url.url must be a URL or a data: URI", param)
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header[5:].split(";", 1)[0] or "image/png"
        if ";base64" not in header:
            raise invalid_request(f"{param}: only base64 data: URIs are supported for images", param)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    """User/assistant content (string or parts) as Anthropic content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise invalid_request(f"{param} must be a string or a list of content parts", param)
    blocks = []
    for i, part in enumerate(content):
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
            raise invalid_request(f"{p}: content part type {kind!r} is not supported by Anthropic models", p)
    return blocks


def _tool_use(call: Any, param: str) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise invalid_request(f"{param} must be a function tool call", param)
    fn = call["function"]
    raw = fn.get("arguments") or "{}"
    try:
        args = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    except orjson.JSONDecodeError:
        raise invalid_request(f"{param}.function.arguments is not valid JSON", param) from None
    if not isinstance(args, dict):
        args = {"value": args}
    return {"type": "tool_use", "id": str(call.get("id", "")), "name": str(fn.get("name", "")), "input": args}


def _stop_sequences(stop: Any) -> list[str]:
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise invalid_request("stop must be a string or a list of strings", "stop")


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add a turn, merging with the previous one of the same role (Anthropic alternates roles)."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def translate_messages(raw: Any) -> tuple[str | None, list[dict[str, Any]]]:
    if not isinstance(raw, list):
        raise invalid_request("messages must be a list of message objects", "messages")
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for i, msg in enumerate(raw):
        param = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise invalid_request(f"{param} must be an object", param)
        role = msg.get("role")
        content = msg.get("content")
        if role in ("system", "developer"):
            system.append(_text_of(content, param + ".content"))
        elif role == "user":
            _append(messages, "user", _blocks(content, param + ".content"))
        elif role == "assistant":
            blocks = _blocks(content, param + ".content")
            calls = msg.get("tool_calls") or ()
            if not isinstance(calls, list | tuple):
                raise invalid_request(f"{param}.tool_calls must be a list of tool calls", param + ".tool_calls")
            for j, call in enumerate(calls):
                blocks.append(_tool_use(call, f"{param}.tool_calls[{j}]"))
            _append(messages, "assistant", blocks)
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(msg.get("tool_call_id", "")),
                "content": _text_of(content, param + ".content"),
            }
            _append(messages, "user", [result])
        else:
            raise invalid_request(f"{param}.role {role!r} is not one of system, user, assistant, tool", param + ".role")
    return ("\n\n".join(s for s in system if s) or None), messages


def translate_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid_request("tools must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not fn.get("name"):
            raise invalid_request(f"tools[{i}] must be a function tool with a name", f"tools[{i}]")
        spec: dict[str, Any] = {
            "name": fn["name"],
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            spec["description"] = fn["description"]
        out.append(spec)
    return out


def translate_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if choice is None:
        result: dict[str, Any] | None = {"type": "auto"} if parallel is False else None
    elif choice == "auto":
        result = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        result = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        result = {"type": "tool", "name": choice["function"].get("name", "")}
    else:
        raise invalid_request("tool_choice must be auto, none, required or a function choice", "tool_choice")
    if result is not None and parallel is False:
        result["disable_parallel_tool_use"] = True
    return result


# --- response ------------------------------------------------------------------------


def _usage(raw: Any) -> tuple[int | None, int | None, dict[str, Any] | None]:
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
    return prompt, completion, openai_usage


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": block.get("id", ""),
        "type": "function",
        "function": {"name": block.get("name", ""), "arguments": orjson.dumps(block.get("input") or {}).decode()},
    }


class AnthropicDialect(Dialect):
    name = "anthropic"
    kinds = frozenset({"chat"})

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        if kind != "chat":
            raise unsupported(self.name, kind, model)
        system, messages = translate_messages(body.get("messages"))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        out: dict[str, Any] = {"model": model.upstream_model, "max_tokens": max_tokens, "messages": messages}
        if system:
            out["system"] = system
        for name in ("temperature", "top_p", "top_k"):
            if body.get(name) is not None:
                out[name] = body[name]
        stop = body.get("stop")
        if stop:
            out["stop_sequences"] = _stop_sequences(stop)
        if body.get("tools"):
            out["tools"] = translate_tools(body["tools"])
        choice = translate_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None and "tools" in out:
            out["tool_choice"] = choice
        if isinstance(body.get("user"), str):
            out["metadata"] = {"user_id": body["user"]}
        if stream:
            out["stream"] = True
        headers = {"Content-Type": "application/json", **self.auth_headers(api_key)}
        return PreparedRequest("POST", join_url(base_url, "/messages"), headers, encode(out))

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Anthropic authenticates with `x-api-key` and needs `anthropic-version` on every call."""
        if api_key:
            return {"anthropic-version": API_VERSION, "x-api-key": api_key}
        return {"anthropic-version": API_VERSION}

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model)
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in data.get("content") or ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                calls.append(_tool_call(block))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        prompt, completion, openai_usage = _usage(data.get("usage"))
        out: dict[str, Any] = {
            "id": data.get("id", ""),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": data.get("model") or model.upstream_model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": FINISH_REASONS.get(data.get("stop_reason") or "", "stop"),
                    "logprobs": None,
                }
            ],
        }
        if openai_usage is not None:
            out["usage"] = openai_usage
        return ParsedResponse(orjson.dumps(out), (prompt, completion))

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        return translate_sse(chunks, model)


# --- streaming -----------------------------------------------------------------------

DONE = b"data: [DONE]\n\n"


def _events(buffer: bytearray) -> list[bytes]:
    """Pop every complete SSE event's joined `data:` payload from the buffer."""
    out = []
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return out
        event = bytes(buffer[:end])
        del buffer[: end + 2]
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(b"\n".join(data))


class _StreamState:
    """Per-stream translation state: ids, the pending role, tool-call index mapping."""

    __slots__ = ("head", "role_sent", "tools", "prompt", "completion", "model")

    def __init__(self, model: ModelSpec) -> None:
        self.head: dict[str, Any] = {
            "id": "",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model.upstream_model,
        }
        self.role_sent = False
        self.tools: dict[int, int] = {}  # anthropic block index -> openai tool_calls index
        self.prompt: int | None = None
        self.completion: int | None = None

    def frame(self, delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        chunk = {**self.head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
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
    state = _StreamState(model)
    buffer = bytearray()
    async for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
        for payload in _events(buffer):
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
            if kind == "content_block_delta":
                delta = event.get("delta") or {}
                dtype = delta.get("type")
                if dtype == "text_delta":
                    yield state.frame({"content": delta.get("text", "")})
                elif dtype == "input_json_delta":
                    index = state.tools.get(event.get("index", -1))
                    if index is not None:
                        args = delta.get("partial_json", "")
                        yield state.frame({"tool_calls": [{"index": index, "function": {"arguments": args}}]})
            elif kind == "content_block_start":
                block = event.get("content_block") or {}
                if block.get("type") == "tool_use":
                    index = state.tools[event.get("index", len(state.tools))] = len(state.tools)
                    call = {
                        "index": index,
                        "id": block.get("id", ""),
                        "type": "function",
                        "function": {"name": block.get("name", ""), "arguments": ""},
                    }
                    yield state.frame({"tool_calls": [call]})
                elif block.get("type") == "text" and block.get("text"):
                    yield state.frame({"content": block["text"]})
            elif kind == "message_start":
                message = event.get("message") or {}
                state.head["id"] = message.get("id", "")
                if message.get("model"):
                    state.head["model"] = message["model"]
                state.prompt, _, _ = _usage(message.get("usage"))
            elif kind == "message_delta":
                usage = event.get("usage") or {}
                if type(usage.get("output_tokens")) is int:
                    state.completion = usage["output_tokens"]
                if type(usage.get("input_tokens")) is int and state.prompt is None:
                    state.prompt = usage["input_tokens"]
                reason = (event.get("delta") or {}).get("stop_reason") or ""
                prompt, completion = state.prompt or 0, state.completion or 0
                totals = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                yield state.frame({}, FINISH_REASONS.get(reason, "stop"), totals)
            elif kind == "message_stop":
                yield DONE
                return
            elif kind == "error":
                yield _error_frame(event.get("error"))
                return
            # ping, content_block_stop, thinking deltas: nothing to relay
