"""Anthropic Messages client -> chat upstream (`/v1/messages` on a link that does not speak Messages).

docs/anthropic-messages.md#translation. The client's request becomes the gateway's internal chat
shape (`chat_request`; what it cannot carry is noted in `Gaps`, for the link to refuse or drop),
which the link's dialect sends as any chat request; the chat.completion comes back as a message
(`message_of`) and the committed chunk stream as Anthropic's events (`MessagesStream`, a tap).
The reverse direction is routing.upstream.translate.chat_to_anthropic; a link that speaks
Messages is routing.upstream.translate.messages_passthrough's.
"""

from __future__ import annotations

from typing import Any

import orjson

from routing.core.errors import GatewayError, invalid_request
from routing.core.prices import token_classes
from routing.core.sse import json_event, normalise, pop_events
from routing.core.stream import relayed_tokens
from routing.upstream.translate.shared import (
    error_type,
    image_url_of,
    reasoning_of,
    stop_of,
    tool_call_of,
    tool_use_of,
)

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
        "thinking",
    }
)
HINT_FIELDS = frozenset({"context_management", "cache_control", "service_tier"})
# `thinking: {type: enabled, budget_tokens}` as chat's `reasoning_effort`: a budget below the first bound is
# `low`, below the second `medium`, else `high` (so Claude Code's 4 000 / 10 000 / 31 999 of "think", "think
# hard" and "ultrathink" are low / medium / high, and the budgets routing.upstream.translate.anthropic_structured
# gives each effort map back to it). `adaptive` takes `output_config.effort` (Anthropic's `max` is `high`).
EFFORT_BOUNDS = ((4096, "low"), (16384, "medium"))
ADAPTIVE_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
THINKING_TYPES = frozenset({"enabled", "adaptive", "disabled"})
# Blocks of earlier assistant turns that carry nothing another model can use.
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class Gaps:
    """What a translated link cannot carry of one Messages request, found while translating it.

    A passthrough link needs none of this (it gets the client's own body), so nothing here is
    refused at once: `dropped` are hints a translated link goes without, `refused` the fields it
    cannot serve at all, (param, what) in request order; routing.gateway.messages.MessagesHook refuses
    the request on such a link only.
    """

    __slots__ = ("dropped", "refused", "reasoning")

    def __init__(self) -> None:
        self.dropped: list[str] = []
        self.refused: list[tuple[str, str]] = []
        # the client's fields chat's `reasoning_effort` was made of: a hint, dropped on a link whose model
        # does not declare `reasoning` (routing.upstream.translate.shared.reasoning_gated)
        self.reasoning: tuple[str, ...] = ()

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


def reasoning_effort_of(thinking: Any, effort: Any = None) -> str | None:
    """Chat's `reasoning_effort` for a Messages `thinking` (and, with adaptive thinking, `output_config.effort`);
    None: nothing to ask (`disabled`, or adaptive without an effort: the upstream's own default)."""
    if not isinstance(thinking, dict):
        raise invalid_request("thinking must be an object", "thinking")
    kind = thinking.get("type")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if type(budget) is not int or budget < 1:
            raise invalid_request("thinking.budget_tokens must be a positive integer", "thinking.budget_tokens")
        return next((name for bound, name in EFFORT_BOUNDS if budget < bound), "high")
    if kind == "adaptive":
        return ADAPTIVE_EFFORTS.get(effort) if isinstance(effort, str) else None
    return None  # disabled (another type is refused on a translated link: _top_level)


def _output_config(config: Any, out: dict[str, Any], gaps: Gaps, effort_used: bool = False) -> None:
    """`output_config`: its JSON schema `format` is chat's `response_format`; `effort` is a hint, but for
    adaptive thinking, where it is the reasoning effort (`effort_used`)."""
    if not isinstance(config, dict):
        raise invalid_request("output_config must be an object", "output_config")
    for key, value in config.items():
        if key == "format" and isinstance(value, dict) and value.get("type") == "json_schema":
            schema = {"name": "output", "schema": value.get("schema") or {}}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif key == "effort":
            if not effort_used:
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
    config = body.get("output_config")
    effort_used = False
    thinking = body.get("thinking")
    if thinking is not None:
        reasoning = reasoning_effort_of(thinking, config.get("effort") if isinstance(config, dict) else None)
        kind = thinking.get("type")
        if not (isinstance(kind, str) and kind in THINKING_TYPES):
            gaps.refuse("thinking.type", f"the thinking type {thinking.get('type')!r}")
        elif reasoning is not None:
            out["reasoning_effort"] = reasoning
            effort_used = thinking["type"] == "adaptive"
            gaps.reasoning = ("thinking", "output_config.effort") if effort_used else ("thinking",)
    if config is not None:
        _output_config(config, out, gaps, effort_used)
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


def _detail(usage: dict[str, Any], details: str, name: str) -> int:
    """A positive count of a chat usage's `*_tokens_details`, else 0."""
    found = usage.get(details)
    value = found.get(name) if isinstance(found, dict) else None
    return value if type(value) is int and value > 0 else 0


def message_usage(usage: Any) -> dict[str, Any]:
    """Anthropic usage for an OpenAI usage object: cached prompt tokens as cache reads (cache writes, which
    a translated Anthropic or Bedrock answer names in Anthropic's own field, as writes), `input_tokens` what
    is left, and the reasoning tokens as `output_tokens_details.thinking_tokens`."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    prompt = prompt if type(prompt) is int else 0
    cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
    written = usage.get("cache_creation_input_tokens")
    written = written if type(written) is int and written > 0 else 0
    out: dict[str, Any] = {"input_tokens": prompt, "output_tokens": completion if type(completion) is int else 0}
    if cached + written <= prompt:
        out["input_tokens"] = prompt - cached - written
        if cached:
            out["cache_read_input_tokens"] = cached
        if written:
            out["cache_creation_input_tokens"] = written
    reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    if reasoning:
        out["output_tokens_details"] = {"thinking_tokens": reasoning}
    return out


def thinking_block(text: str) -> dict[str, Any]:
    """A thinking block of a chat upstream's reasoning. Its signature is empty: only Anthropic signs thinking,
    and the gateway never invents one (routing.upstream.translate.shared.without_foreign_thinking keeps such
    a block, sent back by the client, away from an Anthropic upstream)."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def message_of(data: Any, fallback_id: str = "") -> dict[str, Any]:
    """The Anthropic message for an OpenAI chat.completion (the first choice)."""
    data = data if isinstance(data, dict) else {}
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        content.append(thinking_block(reasoning))
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


PING = json_event("ping", {"type": "ping"})


class MessagesStream:
    """Turns a committed OpenAI chunk stream into Anthropic's event sequence, frame by frame.

    message_start (and one ping) go out with the first frame, its `input_tokens` the gateway's
    prompt estimate (`input_tokens`: a chat upstream reports its usage in its last frame only);
    reasoning deltas open a thinking block (thinking_delta, no signature_delta: nothing signs
    them), text deltas a text block, each tool call its own tool_use block (its argument pieces
    as input_json_delta); a new block closes the open one. The finish reason and the usage frame
    are remembered and sent in message_delta when `[DONE]` arrives — the upstream's own counts,
    which replace message_start's (cache reads, reasoning tokens included) — then message_stop. An error
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
        "_input",
        "_usage",
        "classes",
    )

    def __init__(self, message_id: str = "", input_tokens: int = 0) -> None:
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None
        # text relayed, for the estimate of a stream cut before its usage (docs/usage-records.md#partial)
        self._chars = 0
        self._frames = 0
        self._id = message_id
        self._input = input_tokens  # message_start's count, until the upstream's usage
        self._usage: dict[str, Any] | None = None  # the upstream's usage frame, for message_delta
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
        normalise(self._buf, chunk)
        out: list[bytes] = []
        for _, payload in pop_events(self._buf):
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
            self._usage = usage
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
            reasoning = reasoning_of(delta)
            if reasoning:
                if self._kind != "thinking":
                    self._open(thinking_block(""), "thinking", out)
                self._delta({"type": "thinking_delta", "thinking": reasoning}, self._block, out)
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
            "usage": {"input_tokens": self._input, "output_tokens": 0},
        }
        out.append(json_event("message_start", {"type": "message_start", "message": message}))
        out.append(PING)

    def _open(self, block: dict[str, Any], kind: str, out: list[bytes]) -> int:
        self._close(out)
        self._block, self._kind = self._next, kind
        self._next += 1
        out.append(
            json_event(
                "content_block_start", {"type": "content_block_start", "index": self._block, "content_block": block}
            )
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
        self._chars += len(delta.get("text") or delta.get("partial_json") or delta.get("thinking") or "")
        self._frames += 1
        out.append(json_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))

    def _close(self, out: list[bytes]) -> None:
        if self._block >= 0:
            out.append(json_event("content_block_stop", {"type": "content_block_stop", "index": self._block}))
            self._block, self._kind = -1, ""

    def _finish(self, out: list[bytes]) -> None:
        self._start({}, out)
        self._close(out)
        usage = message_usage(self._usage) if self._usage is not None else {"output_tokens": 0}
        delta = {"stop_reason": self._stop, "stop_sequence": self._seq}
        out.append(json_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(json_event("message_stop", {"type": "message_stop"}))
        self._ended = True

    def _error(self, error: Any, out: list[bytes]) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or "the upstream stream failed; retry the request")
        kind = error_type(500, error.get("type"))
        out.append(json_event("error", {"type": "error", "error": {"type": kind, "message": message}}))
        self._ended = True
