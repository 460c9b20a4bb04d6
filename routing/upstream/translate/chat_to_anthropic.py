"""Chat Completions client -> Anthropic Messages upstream (the `anthropic` dialect, and Claude on `vertex`).

Requests: system messages become `system`, image_url parts image blocks, assistant tool_calls
tool_use blocks, tool messages user tool_result blocks, OpenAI function tools Anthropic tools;
`response_format` and `reasoning_effort` are anthropic_structured's (docs/translation.md#anthropic).
Answers and SSE streams come back as chat.completion / chat.completion.chunk, so a chat client
never sees the difference. Non-2xx upstream bodies are left to routing.core.errors (529
overloaded is a 5xx). The reverse direction is routing.upstream.translate.messages_to_chat.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.errors import invalid_request
from routing.core.sse import DONE, data_frame, normalise, pop_events
from routing.upstream.translate import anthropic_structured, openai_request
from routing.upstream.translate.anthropic_structured import STRUCTURED_TOOL
from routing.upstream.translate.shared import (
    DEFAULT_MAX_TOKENS,
    FINISH_REASONS,
    anthropic_usage,
    chat_gaps,
    tool_call_of,
    tool_use_of,
)

# --- OpenAI chat request -> Anthropic upstream request (the anthropic dialect) --------
# The OpenAI fields are read and checked by routing.upstream.translate.openai_request, as for
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


def gaps(body: dict[str, Any], model: ModelSpec) -> tuple[str, ...]:
    """The chat hints this link drops (for x-switchboard-dropped); a 400 for the fields it cannot give.

    Anthropic's Messages API has one answer per request, no token logprobs and no seed; `user` becomes
    `metadata.user_id` and `parallel_tool_calls: false` becomes `disable_parallel_tool_use`."""
    return chat_gaps(body, model.id, model.provider.dialect, ("n", "logprobs"), ("seed",))


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
        return data_frame(orjson.dumps(chunk))


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
    return data_frame(orjson.dumps(payload))


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
        normalise(buffer, chunk)
        for _, payload in pop_events(buffer):
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
