"""Chat Completions client -> AWS Bedrock Converse upstream, streams included (docs/providers.md#bedrock).

Requests reuse the Anthropic translation of chat messages (routing.upstream.translate.chat_to_anthropic:
roles merged so they alternate, system messages pulled out, tool calls and results as
blocks) and rename its blocks into Converse's: `text`, `image` (base64 bytes),
`toolUse`, `toolResult`. Answers and ConverseStream events (decoded from the
`application/vnd.amazon.eventstream` framing by botocore's EventStreamBuffer) come back as
chat.completion / chat.completion.chunk, so /v1/messages translates them like any
other chat upstream. `response_format` and `reasoning_effort` are bedrock_structured's
(docs/translation.md#bedrock): the structured answer's tool input comes back as the content,
`reasoningContent` as `reasoning_content`, cache reads and writes in the usage.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.errors import invalid_request
from routing.core.failures import UpstreamFailure
from routing.core.ids import new_id
from routing.core.sse import DONE, data_frame
from routing.upstream.translate import bedrock_structured, openai_request
from routing.upstream.translate.bedrock_structured import STRUCTURED_TOOL
from routing.upstream.translate.chat_to_anthropic import translate_messages, translate_tools
from routing.upstream.translate.shared import DEFAULT_MAX_TOKENS, anthropic_usage, chat_gaps, tool_call_of

# Converse stopReason -> OpenAI finish_reason.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
IMAGE_FORMATS = frozenset({"png", "jpeg", "gif", "webp"})


# --- chat request -> Converse request ------------------------------------------------


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        raise invalid_request(
            f"{param}: Bedrock takes images only as base64 data: URIs (data:image/png;base64,...); "
            "download the image and send it inline",
            param,
        )
    fmt = str(source.get("media_type", "")).removeprefix("image/")
    fmt = "jpeg" if fmt == "jpg" else fmt
    if fmt not in IMAGE_FORMATS:
        raise invalid_request(f"{param}: Bedrock takes png, jpeg, gif or webp images, not {fmt!r}", param)
    return {"image": {"format": fmt, "source": {"bytes": source.get("data", "")}}}


def _block(block: dict[str, Any], param: str) -> dict[str, Any] | None:
    """One Anthropic-shaped block as a Converse content block (None: nothing to send)."""
    kind = block.get("type")
    if kind == "text":
        return {"text": block["text"]} if block.get("text") else None
    if kind == "image":
        return _image(block, param)
    if kind == "tool_use":
        return {"toolUse": {"toolUseId": block["id"], "name": block["name"], "input": block["input"]}}
    if kind == "tool_result":
        return {"toolResult": {"toolUseId": block["tool_use_id"], "content": [{"text": block.get("content") or ""}]}}
    raise invalid_request(f"{param}: content of type {kind!r} cannot be sent to Bedrock", param)


def converse_messages(raw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) of a chat `messages` list in Converse's shape."""
    system, turns = translate_messages(raw)
    messages = []
    for i, turn in enumerate(turns):
        blocks = [b for b in (_block(block, f"messages[{i}].content") for block in turn["content"]) if b is not None]
        if blocks:
            messages.append({"role": turn["role"], "content": blocks})
    return ([{"text": system}] if system else []), messages


def tool_config(body: dict[str, Any]) -> dict[str, Any] | None:
    """Converse's toolConfig for the chat `tools` / `tool_choice` (None: no tools, or tool_choice none)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    specs = [
        {
            "toolSpec": {
                "name": spec["name"],
                **({"description": spec["description"]} if spec.get("description") else {}),
                "inputSchema": {"json": spec["input_schema"]},
            }
        }
        for spec in translate_tools(tools)
    ]
    config: dict[str, Any] = {"tools": specs}
    read = openai_request.tool_choice_of(choice)
    if read is not None and read[0] == "required":
        config["toolChoice"] = {"any": {}}
    elif read is not None and read[0] == "function":
        config["toolChoice"] = {"tool": {"name": str(read[1])}}
    return config


def gaps(body: dict[str, Any], model: ModelSpec) -> tuple[str, ...]:
    """The chat hints this link drops (for x-switchboard-dropped); a 400 for the fields it cannot give.

    Converse has one answer per request, no token logprobs, no seed, no end-user id and no switch against
    parallel tool use."""
    return chat_gaps(body, model.id, model.provider.dialect, ("n", "logprobs"), ("seed", "user", "parallel_tool_calls"))


def converse_request(body: dict[str, Any], model: ModelSpec | None = None) -> dict[str, Any]:
    """The Converse / ConverseStream body for an OpenAI chat body (the model goes in the URL; structured
    output and reasoning: bedrock_structured, within the range of `model`, the serving model)."""
    system, messages = converse_messages(body.get("messages"))
    out: dict[str, Any] = {"messages": messages}
    if system:
        out["system"] = system
    inference: dict[str, Any] = {"maxTokens": openai_request.max_tokens_of(body) or DEFAULT_MAX_TOKENS}
    if body.get("temperature") is not None:
        inference["temperature"] = body["temperature"]
    if body.get("top_p") is not None:
        inference["topP"] = body["top_p"]
    if body.get("stop"):
        inference["stopSequences"] = openai_request.stop_sequences(body["stop"])
    out["inferenceConfig"] = inference
    config = tool_config(body)
    if config is not None:
        out["toolConfig"] = config
    upstream, model_id = (model.upstream_model, model.id) if model is not None else ("", "")
    bedrock_structured.apply(body, out, upstream, model_id, model.max_output_tokens if model is not None else None)
    return out


# --- Converse answer -> chat.completion ---------------------------------------------


def usage_of(raw: Any) -> tuple[int | None, int | None, dict[str, Any] | None]:
    """(prompt tokens, completion tokens, OpenAI usage object) of Converse's `usage`.

    Converse counts tokens as Anthropic does (`inputTokens` without the cache reads and writes), so
    the usage is Anthropic's: cache reads as `prompt_tokens_details.cached_tokens`, and cache writes,
    which have no OpenAI field, as `cache_creation_input_tokens` beside `cache_read_input_tokens`."""
    if not isinstance(raw, dict):
        return None, None, None
    cached, written = raw.get("cacheReadInputTokens"), raw.get("cacheWriteInputTokens")
    return anthropic_usage(
        {
            "input_tokens": raw.get("inputTokens"),
            "output_tokens": raw.get("outputTokens"),
            "cache_read_input_tokens": cached if type(cached) is int else 0,
            "cache_creation_input_tokens": written if type(written) is int else 0,
        }
    )


def _tool_call(use: dict[str, Any]) -> dict[str, Any]:
    return tool_call_of({"id": use.get("toolUseId", ""), "name": use.get("name", ""), "input": use.get("input", {})})


def _read_blocks(blocks: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(texts, thoughts, tool calls) of a Converse message's content; the structured answer's input is the text."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        use, reasoning = block.get("toolUse"), block.get("reasoningContent")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(use, dict) and use.get("name") == STRUCTURED_TOOL:
            texts = [orjson.dumps(use.get("input") or {}).decode()]
        elif isinstance(use, dict):
            calls.append(_tool_call(use))
        elif isinstance(reasoning, dict) and isinstance(reasoning.get("reasoningText"), dict):
            thoughts.append(str(reasoning["reasoningText"].get("text") or ""))
    return texts, thoughts, calls


def chat_completion_of(data: dict[str, Any], model: str) -> tuple[dict[str, Any], int | None, int | None]:
    """(chat.completion, prompt tokens, completion tokens) for a Converse answer."""
    output = data.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    texts, thoughts, calls = _read_blocks((message or {}).get("content") or ())
    answer: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        answer["reasoning_content"] = "".join(thoughts)
    if calls:
        answer["tool_calls"] = calls
    prompt, completion, usage = usage_of(data.get("usage"))
    stop = str(data.get("stopReason"))
    choice = {
        "index": 0,
        "message": answer,
        "logprobs": None,
        "finish_reason": "stop" if stop == "tool_use" and not calls else FINISH_REASONS.get(stop, "stop"),
    }
    out: dict[str, Any] = {
        "id": "chatcmpl-" + new_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    if usage is not None:
        out["usage"] = usage
    return out, prompt, completion


# --- ConverseStream events -> chat.completion.chunk frames ------------------------------


class ChunkState:
    """Per-stream translation state: the chunk head, the pending role, tool-call indexes, usage."""

    __slots__ = ("head", "role_sent", "tools", "stopped", "structured")

    def __init__(self, model: str) -> None:
        self.head = {
            "id": "chatcmpl-" + new_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self.role_sent = False
        self.tools: dict[int, int] = {}  # contentBlockIndex -> OpenAI tool_calls index
        self.stopped = False  # messageStop seen: the answer is complete
        self.structured: int | None = None  # the contentBlockIndex of the structured answer (bedrock_structured)

    def frame(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_frame(orjson.dumps({**self.head, "choices": [choice]}))

    def usage_frame(self, usage: dict[str, Any]) -> bytes:
        """OpenAI's usage-only chunk (`choices: []`), as `stream_options.include_usage` gives it."""
        return data_frame(orjson.dumps({**self.head, "choices": [], "usage": usage}))

    def delta(self, data: dict[str, Any]) -> bytes | None:
        """A contentBlockDelta as a chunk: text and the structured answer's input as content, reasoning
        text as reasoning_content, a tool's input as its call's arguments (signatures: no chat field)."""
        delta = data.get("delta") or {}
        if isinstance(delta.get("text"), str):
            return self.frame({"content": delta["text"]})
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            text = reasoning.get("text")
            return self.frame({"reasoning_content": text}) if isinstance(text, str) and text else None
        use = delta.get("toolUse")
        if not isinstance(use, dict):
            return None
        block = data.get("contentBlockIndex", -1)
        if self.structured is not None and block == self.structured:
            return self.frame({"content": use.get("input", "")})
        index = self.tools.get(block)
        if index is None:
            return None
        return self.frame({"tool_calls": [{"index": index, "function": {"arguments": use.get("input", "")}}]})

    def event(self, name: str, data: dict[str, Any]) -> bytes | None:
        """The chunk for one ConverseStream event (None: nothing to relay)."""
        if name == "contentBlockDelta":
            return self.delta(data)
        if name == "contentBlockStart":
            start = (data.get("start") or {}).get("toolUse")
            if not isinstance(start, dict):
                return None
            if start.get("name") == STRUCTURED_TOOL:
                self.structured = data.get("contentBlockIndex", -1)
                return None
            index = self.tools[data.get("contentBlockIndex", len(self.tools))] = len(self.tools)
            call = {
                "index": index,
                "id": start.get("toolUseId", ""),
                "type": "function",
                "function": {"name": start.get("name", ""), "arguments": ""},
            }
            return self.frame({"tool_calls": [call]})
        if name == "messageStop":
            self.stopped = True
            stop = str(data.get("stopReason"))
            structured_only = stop == "tool_use" and not self.tools and self.structured is not None
            return self.frame({}, "stop" if structured_only else FINISH_REASONS.get(stop, "stop"))
        if name == "metadata":
            _, _, usage = usage_of(data.get("usage"))
            return self.usage_frame(usage) + DONE if usage is not None else DONE
        return None  # messageStart (the role goes with the first delta), contentBlockStop


def error_frame(message: str, kind: str) -> bytes:
    """The terminal in-stream error frame of a stream that failed after its first content."""
    payload = {"error": {"message": message, "type": kind, "code": "upstream_stream_error", "param": None}}
    return data_frame(orjson.dumps(payload))


async def translate_events(
    chunks: AsyncIterator[bytes], model: str, failure: Callable[[str, str], UpstreamFailure]
) -> AsyncIterator[bytes]:
    """ConverseStream's eventstream bytes -> OpenAI chat.completion.chunk SSE frames.

    An exception message before any content is raised as `failure(type, message)`, so a
    throttled or invalid stream is retried, failed over or refused like the same error
    as an HTTP status; after content it ends the stream with one error frame. `[DONE]`
    follows the usage (`metadata`, which Bedrock sends after messageStop); a stream
    that ends without messageStop ends without `[DONE]` (the stream layer reports it).
    """
    from botocore.eventstream import EventStreamBuffer, ParserError

    state = ChunkState(model)
    buffer = EventStreamBuffer()
    async for chunk in chunks:
        buffer.add_data(chunk)
        try:
            messages = list(buffer)
        except ParserError as exc:
            yield error_frame(f"the upstream event stream is malformed ({type(exc).__name__})", "invalid_stream")
            return
        for message in messages:
            headers = message.headers
            kind = headers.get(":message-type")
            if kind != "event":
                name = str(headers.get(":exception-type") or headers.get(":error-code") or "unknownError")
                text = _exception_message(message.payload, headers)
                if not state.role_sent:
                    raise failure(name, text)
                yield error_frame(text, name)
                return
            try:
                data = orjson.loads(message.payload) if message.payload else {}
            except orjson.JSONDecodeError:
                yield error_frame("the upstream sent an event whose payload is not JSON", "invalid_stream")
                return
            out = state.event(str(headers.get(":event-type")), data if isinstance(data, dict) else {})
            if out is not None:
                yield out
                if out.endswith(DONE):
                    return
    if state.stopped:
        yield DONE  # complete answer, no metadata event: end it; usage is estimated


def _exception_message(payload: bytes, headers: dict[str, Any]) -> str:
    try:
        data = orjson.loads(payload) if payload else {}
    except orjson.JSONDecodeError:
        data = {}
    message = data.get("message") if isinstance(data, dict) else None
    return str(message or headers.get(":error-message") or "the upstream stream reported an error")
