"""What two or more translators share, public: the Anthropic wire's tables and blocks, the usage objects,
the per-link reasoning gate of a translated request and the pass-throughs' hold before the commit.

A translator module (routing.upstream.translate.<client>_to_<upstream>) imports from here, from
routing.upstream.translate.openai_request (reading a chat request) and from routing.core.sse (the
stream framing), never another translator's private names: so one direction moves or changes
without pulling another with it. Both directions of the Anthropic pair read the same stop-reason
tables and the same tool_call <-> tool_use and image <-> image_url helpers, so a field is mapped the
same way whichever way it travels.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import orjson

from routing.config.schema import REASONING
from routing.core import errors
from routing.core.errors import invalid_request
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.sse import DONE, event_name, normalise, pop_frames
from routing.upstream.translate import openai_request

HOLD_MAX_EVENTS = 16  # pass-through: events without content held before the commit (as routing.core.stream does)

# --- the Anthropic Messages wire, both directions ---------------------------------

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


# --- OpenAI usage objects ----------------------------------------------------------


def usage_object(prompt: int | None, completion: int | None, cached: Any = 0) -> dict[str, Any]:
    """The OpenAI `usage` of a chat answer: unknown counts as 0, cached prompt tokens in the details."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt or 0,
        "completion_tokens": completion or 0,
        "total_tokens": (prompt or 0) + (completion or 0),
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def usage_of(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """OpenAI (prompt/completion_tokens) or Responses API (input/output_tokens) usage."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return (None, None)
    prompt = usage.get("prompt_tokens")
    if prompt is None:
        prompt = usage.get("input_tokens")
    completion = usage.get("completion_tokens")
    if completion is None:
        completion = usage.get("output_tokens")
    # each an int or None, tested inline: every answer passes here
    return (prompt if type(prompt) is int else None, completion if type(completion) is int else None)


# --- reasoning ----------------------------------------------------------------------


def reasoning_of(message: Mapping[str, Any]) -> str:
    """The reasoning text of a chat message or delta: `reasoning_content` (DeepSeek, vLLM, and the gateway's
    own translations) or `reasoning` (OpenRouter, Ollama, newer vLLM); "" when it has none."""
    for key in ("reasoning_content", "reasoning"):
        text = message.get(key)
        if isinstance(text, str) and text:
            return text
    return ""


def reasoning_gated(
    chat: Mapping[str, Any], capabilities: Collection[str], dropped: Sequence[str], asked_by: Sequence[str]
) -> tuple[dict[str, Any] | None, str]:
    """(the link's chat body, its x-switchboard-dropped) for a Messages or Responses request translated to chat.

    One rule for both client protocols, so it cannot drift between them: the `reasoning_effort` a
    Messages `thinking` or a Responses `reasoning` became goes only to a link whose model declares the
    `reasoning` capability, because a chat model that cannot reason (gpt-4o, many vLLM and llama.cpp
    models) answers 400 to the field and Claude Code sends `thinking` on every request. Any other link
    gets a copy of `chat` without it, and the client's fields the effort came from (`asked_by`) are named
    after the hints already `dropped`. The body is None where the link keeps the field: the caller's own
    stands, so a link that reasons (or a request without an effort) costs no copy.
    """
    if "reasoning_effort" not in chat or REASONING in capabilities:
        return None, ", ".join(dropped)
    lean = {name: value for name, value in chat.items() if name != "reasoning_effort"}
    return lean, ", ".join([*dropped, *(name for name in asked_by if name not in dropped)])


# --- pass-through event streams ----------------------------------------------------


Frame = tuple[bytes, bytes | None, bytes | None]  # (raw frame, event name, joined data), as pop_frames gives
DONE_FRAME: Frame = (DONE, None, b"[DONE]")


class Framed(bytes):
    """Whole SSE frames as one chunk, carrying the frames as the pass-through read them (`frames`).

    The pass-through frames every event once to find its commit; its tap (`ResponsesRelay`,
    `AnthropicRelay`) reads the same events again for their usage. Handed these, the tap takes the
    frames as read instead of splitting the bytes a second time (`frames_of`). The bytes are the
    frames' raw bytes joined, so a step that does not know the type (the commit, the relay, the
    journal) treats it as any chunk; one that rebuilds it (a concatenation, a slice) gives plain
    bytes, which the tap frames itself.
    """

    frames: list[Frame]


def framed(frames: list[Frame]) -> Framed:
    """One chunk of `frames` (whole frames, `\\n` line ends), their bytes joined."""
    chunk = Framed(b"".join([frame[0] for frame in frames]))
    chunk.frames = frames
    return chunk


def frames_of(buffer: bytearray, chunk: bytes) -> Iterable[Frame]:
    """A tap's frames of `chunk`: those the pass-through read, when it is one of its chunks and nothing
    is pending in the tap's `buffer` (a frame cut across plain chunks), else `chunk` framed here."""
    if type(chunk) is Framed and not buffer:
        return chunk.frames
    normalise(buffer, chunk)
    return pop_frames(buffer)


async def held_until_content(
    chunks: AsyncIterator[bytes],
    carries_content: Callable[[bytes, bytes | None], bool],
    error_events: frozenset[bytes],
    end_events: frozenset[bytes],
) -> AsyncIterator[bytes]:
    """A pass-through upstream's named events, unchanged (line ends made \\n), framed for routing.core.stream.

    One framing for the Messages and the Responses pass-through, which differ only in their event names.
    The events before the first that `carries_content` (or before HOLD_MAX_EVENTS of them) are held,
    so a failure before any content can still be retried or failed over: one of `error_events` there
    is raised as a pre-commit failure. The held events go out with that first content event as a
    chunk of their own, before the rest of the same read is framed: an upstream faster than the
    gateway hands over much of its stream at once, and the client's first token should not wait for
    the rest of it. After one of `end_events` (a clean end) a `data: [DONE]` marker tells the relay
    the stream ended as it should (the pass-through's tap takes it out again); after an error event
    the stream just ends, so the relay counts it as broken. Every chunk is `Framed`: the tap reads
    the frames framed here, not the bytes again.
    """
    buffer = bytearray()
    held: list[Frame] | None = []
    async for chunk in chunks:
        normalise(buffer, chunk)
        out: list[Frame] = []
        for frame in pop_frames(buffer):
            _, name, data = frame
            kind = event_name(name, data)
            if held is not None:
                if kind in error_events:
                    detail = data.decode("utf-8", "replace")[:300] if data else ""
                    raise UpstreamFailure(
                        FailureKind.STREAM_ERROR, f"the upstream stream started with an error: {detail}", body=data
                    )
                held.append(frame)
                if not carries_content(kind, data) and len(held) <= HOLD_MAX_EVENTS:
                    continue
                out.extend(held)
                held = None
                if kind not in end_events:
                    yield framed(out)  # the commit, ahead of the rest of this read
                    out = []
                    continue
            else:
                out.append(frame)
            if kind in end_events or kind in error_events:
                if kind in end_events:
                    out.append(DONE_FRAME)
                yield framed(out)
                return
        if out:
            yield framed(out)


# --- thinking blocks of another provider -------------------------------------------


def _unsigned(block: Any) -> bool:
    """Whether a content block is thinking Anthropic did not sign (no signature, or an empty one)."""
    return type(block) is dict and block.get("type") == "thinking" and not block.get("signature")


def _has_unsigned(messages: list[Any]) -> bool:
    """Whether an assistant turn holds an unsigned thinking block (a plain loop: it runs on every
    pass-through request that mentions thinking, Claude Code's all)."""
    for message in messages:
        if type(message) is dict and message.get("role") == "assistant":
            content = message.get("content")
            if type(content) is list:
                for block in content:
                    if _unsigned(block):
                        return True
    return False


def without_foreign_thinking(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Messages body without the thinking blocks no Anthropic model signed, or None when it has none.

    A chat upstream's reasoning reaches a Messages client as a thinking block with an empty signature
    (routing.upstream.translate.messages_to_chat); the client sends it back on its next turn, and
    Anthropic refuses a thinking block whose signature it did not make. So such a block goes to no
    Anthropic upstream (an assistant turn left with nothing goes too); everything else is kept as sent.
    """
    messages = body.get("messages")
    if type(messages) is not list or not _has_unsigned(messages):
        return None
    kept = []
    for message in messages:
        content = message.get("content") if type(message) is dict and message.get("role") == "assistant" else None
        if type(content) is list and any(_unsigned(b) for b in content):
            blocks = [b for b in content if not _unsigned(b)]
            if not blocks:
                continue
            message = {**message, "content": blocks}
        kept.append(message)
    return {**body, "messages": kept}


# --- chat fields a translated link has no counterpart for ------------------------------------------------

CHAT_PROTOCOL = "OpenAI's Chat Completions API"


def _asked(body: dict[str, Any], name: str) -> bool:
    """Whether the chat body asks for `name` in a way the answer would show (n: 1 and logprobs: false do not)."""
    value = body.get(name)
    if name == "n":
        return value is not None and value != 1
    if name == "parallel_tool_calls":
        return value is False and bool(body.get("tools"))
    if name == "logprobs":
        return value is True
    return value is not None


def chat_gaps(
    body: dict[str, Any], model_id: str, dialect: str, refused: tuple[str, ...], hints: tuple[str, ...]
) -> tuple[str, ...]:
    """The hints among `hints` a chat body carries, which the link drops (named in x-switchboard-dropped).

    `refused` are the fields the client relies on (n > 1 choices, logprobs / top_logprobs in the answer):
    asked for on a link that cannot give them, they are a 400 unsupported_capability naming the field, raised
    while the link's request is built, exactly as a Messages request's no-counterpart fields are. `hints` are what
    OpenAI's reference itself calls best effort (seed, user, parallel_tool_calls: false)."""
    for name in refused:
        if _asked(body, name) or (name == "logprobs" and body.get("top_logprobs") is not None):
            param = name if name != "logprobs" or body.get("logprobs") is True else "top_logprobs"
            raise errors.no_counterpart(param, model_id, dialect, CHAT_PROTOCOL)
    return tuple(name for name in hints if _asked(body, name))
