"""Responses client -> chat upstream: `/v1/responses` on a link whose upstream does not speak Responses.

**The request.** `/v1/responses` on a model served by an `anthropic`, `gemini`, `bedrock`, `vertex` or
`ollama` provider (docs/api.md#responses): the body is turned into the gateway's internal
chat shape here, which the link's dialect then translates to its own API as for any chat
call; the answer comes back as below. Stateless
only: every turn carries its items (`store: false`, as Codex sends them).

Mapped: `instructions` and system/developer items (system messages), user and assistant
messages (text and image parts), `function_call` items (assistant tool calls, consecutive
ones in one message), `function_call_output` items (tool messages), function `tools`,
`tool_choice`, `parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`,
`text.format` (json_schema / json_object), `user` / `safety_identifier`, `reasoning.effort`
(chat's `reasoning_effort`, which each dialect maps to its own, e.g. a Claude thinking budget).
Dropped (a chat upstream has no place for them): reasoning items (their text and
`encrypted_content` are the provider's that made them, never sent to another), the rest of
`reasoning` (`summary`: the upstream's reasoning comes back whenever it sends some), `store`,
`include`, `metadata`, `prompt_cache_key`,
`truncation`, `service_tier`, and the tools a chat upstream cannot host (`web_search`,
`file_search`, `code_interpreter`, `namespace` groups, …: offered, never required, so the model
simply does not call them; named in `x-switchboard-dropped`, as Codex CLI offers several on every
turn). Refused, 400 naming the field: `previous_response_id` (no stored state to continue from),
a `tool_choice` that names such a tool, and item or part types with no chat counterpart.

**The answer.** The link answers in the internal chat shape, and the client gets the Responses
shape back (docs/api.md#responses). `response_of` builds the `response` object of a
chat.completion (the upstream's `reasoning_content` or `reasoning` as a `reasoning` item first,
its text as the item's one `summary_text`: a chat upstream has no summaries, and the summary is
what Responses clients show); `ResponsesEvents` turns a committed chunk stream into Responses' events:
`response.created`, `response.in_progress`, then per output item `response.output_item.added`,
(reasoning: `response.reasoning_summary_part.added`, `response.reasoning_summary_text.delta`…,
`response.reasoning_summary_text.done`, `response.reasoning_summary_part.done`; a message: `response.content_part.added`, `response.output_text.delta`…,
`response.output_text.done`, `response.content_part.done`; a function call:
`response.function_call_arguments.delta`…, `.done`), `response.output_item.done`, and
`response.completed` carrying every done item and the usage, with `sequence_number`
counting from 0.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.prices import token_classes
from routing.core.sse import event_frame, normalise, pop_events
from routing.core.stream import relayed_tokens
from routing.upstream.translate.shared import reasoning_of

_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text"})
_DROPPED_ITEMS = frozenset({"reasoning"})
_FORMATS = frozenset({"json_schema", "json_object", "text"})


def _refuse(param: str, what: str) -> GatewayError:
    return errors.invalid_field(param, f"{what} cannot be sent to this model's provider (it is reached by translation)")


def _content(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A message's content as chat content: one string, or text / image_url parts."""
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        p = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        elif kind != "refusal":
            raise _refuse(f"{p}.type", f"a {kind!r} content part")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _messages(items: Any) -> list[dict[str, Any]]:
    """Responses input items as chat messages, in order."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items or ()):
        param = f"input[{i}]"
        kind = item.get("type") or "message"
        if kind == "message":
            role = item.get("role") or "user"
            out.append({"role": "system" if role == "developer" else role, **_text(item, param)})
        elif kind == "function_call":
            call = {"id": str(item.get("call_id") or item.get("id") or ""), "type": "function"}
            call["function"] = {"name": str(item.get("name") or ""), "arguments": str(item.get("arguments") or "{}")}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content(output, f"{param}.output")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": text})
        elif kind not in _DROPPED_ITEMS:
            raise _refuse(f"{param}.type", f"an input item of type {kind!r}")
    return out


def _text(item: dict[str, Any], param: str) -> dict[str, Any]:
    return {"content": _content(item.get("content"), f"{param}.content")}


def _tools(tools: Any, dropped: list[str]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools or ()):
        if tool.get("type") != "function":
            dropped.append(f"tools[{i}] ({tool.get('type')})")
            continue
        fn = {"name": tool.get("name"), "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        for key in ("description", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _refuse("tool_choice", f"a tool_choice of type {choice.get('type')!r}")


def _format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") not in _FORMATS:
        raise _refuse("text.format.type", f"a text format of type {fmt.get('type')!r}")
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
    return {"type": "json_schema", "json_schema": schema}


def chat_request(body: dict[str, Any], dropped: list[str] | None = None) -> dict[str, Any]:
    """The internal chat body for a Responses body (its field types checked by routing.gateway.body_schemas);
    `dropped` gets the offered tools a chat upstream cannot host, and `top_logprobs`: the answer is built
    without log probabilities, so a client that asked for them is told rather than left to find none."""
    dropped = [] if dropped is None else dropped
    if body.get("previous_response_id") is not None:
        raise _refuse("previous_response_id", "a previous_response_id (no stored response to continue from)")
    messages = _messages(body.get("input"))
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    out: dict[str, Any] = {"messages": messages}
    for name, chat_name in (
        ("model", "model"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
        ("safety_identifier", "safety_identifier"),
    ):
        if body.get(name) is not None:
            out[chat_name] = body[name]
    tools = _tools(body.get("tools"), dropped)
    if body.get("top_logprobs"):
        dropped.append("top_logprobs")
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _format(body.get("text"))
    if response_format is not None:
        out["response_format"] = response_format
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        if not isinstance(reasoning["effort"], str):
            raise errors.invalid_field("reasoning.effort", "reasoning.effort must be a string")
        out["reasoning_effort"] = reasoning["effort"]
    if body.get("stream") is True:
        out["stream"] = True
    return out


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens") if type(usage.get("prompt_tokens")) is int else 0
    completion = usage.get("completion_tokens") if type(usage.get("completion_tokens")) is int else 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached if type(cached) is int else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning if type(reasoning) is int else 0},
        "total_tokens": prompt + completion,
    }


def _response(rid: str, model: str, status: str, output: list[Any], usage: Any, finish: Any = None) -> dict[str, Any]:
    reason = _INCOMPLETE.get(finish) if isinstance(finish, str) else None
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if reason and status == "completed" else status,
        "incomplete_details": {"reason": reason} if reason else None,
        "error": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _message_item(iid: str, text: str, status: str = "completed") -> dict[str, Any]:
    parts = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"id": iid, "type": "message", "status": status, "role": "assistant", "content": parts}


def _call_item(iid: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": iid,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _reasoning_item(iid: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning item of a chat upstream's reasoning text, as its one summary (none while in progress)."""
    summary = [{"type": "summary_text", "text": text}] if status == "completed" else []
    return {"id": iid, "type": "reasoning", "summary": summary}


def response_of(data: Any) -> dict[str, Any]:
    """The Responses `response` object for an OpenAI chat.completion (the first choice)."""
    data = data if isinstance(data, dict) else {}
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    rid = str(data.get("id") or "chat")
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(_reasoning_item(f"rs_{rid}", reasoning))
    text = message.get("content")
    if isinstance(text, str) and text:
        output.append(_message_item(f"msg_{rid}", text))
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") if isinstance(call, dict) and isinstance(call.get("function"), dict) else {}
        call_id = str(call.get("id") or f"call_{i}") if isinstance(call, dict) else f"call_{i}"
        output.append(_call_item(f"fc_{call_id}", call_id, str(fn.get("name") or ""), str(fn.get("arguments") or "")))
    usage = _usage(data.get("usage"))
    return _response(
        f"resp_{rid}", str(data.get("model") or ""), "completed", output, usage, choice.get("finish_reason")
    )


def _event(kind: str, seq: int, data: dict[str, Any]) -> bytes:
    payload = orjson.dumps({"type": kind, "sequence_number": seq, **data})
    return event_frame(kind.encode(), payload)


class ResponsesEvents:
    """A committed chat chunk stream as Responses events, frame by frame (a routing.gateway.proxy.Tap)."""

    __slots__ = (
        "prompt_tokens",
        "completion_tokens",
        "classes",
        "_buf",
        "_seq",
        "_id",
        "_model",
        "_started",
        "_ended",
        "_text",
        "_thought",
        "_open",
        "_calls",
        "_done",
        "_finish",
        "_usage",
        "_chars",
    )

    def __init__(self) -> None:
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.classes: dict[str, int] | None = None
        self._buf = bytearray()
        self._seq = 0
        self._id = "resp_chat"
        self._model = ""
        self._started = False
        self._ended = False
        self._text: list[str] | None = None  # the open message item's text, None when none is open
        self._thought: list[str] | None = None  # the open reasoning item's text, None when none is open
        self._open: dict[str, Any] | None = None  # the open function call item
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool_calls index -> its item
        self._done: list[dict[str, Any]] = []  # items done, in order: response.completed's output
        self._finish: Any = None
        self._usage: Any = None
        self._chars = [0, 0]

    @property
    def final(self) -> bool:
        return self.prompt_tokens is not None

    def estimated_completion_tokens(self) -> int:
        return relayed_tokens(self._chars[0], self._chars[1])

    def feed(self, chunk: bytes) -> bytes:
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
        if self._ended:
            return b""
        out: list[bytes] = []
        self._error({"message": "the upstream stream ended unexpectedly; retry the request"}, out)
        return b"".join(out)

    def _emit(self, kind: str, out: list[bytes], **data: Any) -> None:
        out.append(_event(kind, self._seq, data))
        self._seq += 1

    def _frame(self, payload: bytes, out: list[bytes]) -> None:
        if payload == b"[DONE]":
            self._complete(out)
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

    def _start(self, obj: dict[str, Any], out: list[bytes]) -> None:
        if self._started:
            return
        self._started = True
        self._id = f"resp_{obj.get('id') or 'chat'}"
        self._model = str(obj.get("model") or "")
        response = _response(self._id, self._model, "in_progress", [], None)
        self._emit("response.created", out, response=response)
        self._emit("response.in_progress", out, response=response)

    def _choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = reasoning_of(delta)
            if reasoning:
                self._reasoning_delta(reasoning, out)
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._text_delta(text, out)
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._call_delta(call, out)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]

    def _text_delta(self, text: str, out: list[bytes]) -> None:
        if self._text is None:
            self._close(out)
            self._text = []
            item = _message_item(self._item_id("msg"), "", "in_progress")
            self._emit("response.output_item.added", out, output_index=len(self._done), item=item)
            part = {"type": "output_text", "text": "", "annotations": []}
            self._emit("response.content_part.added", out, **self._where(), part=part)
        self._text.append(text)
        self._chars[0] += len(text)
        self._chars[1] += 1
        self._emit("response.output_text.delta", out, **self._where(), delta=text, logprobs=[])

    def _reasoning_delta(self, text: str, out: list[bytes]) -> None:
        if self._thought is None:
            self._close(out)
            self._thought = []
            item = _reasoning_item(self._item_id("rs"), "", "in_progress")
            self._emit("response.output_item.added", out, output_index=len(self._done), item=item)
            part = {"type": "summary_text", "text": ""}
            self._emit("response.reasoning_summary_part.added", out, **self._summary(), part=part)
        self._thought.append(text)
        self._chars[0] += len(text)
        self._chars[1] += 1
        self._emit("response.reasoning_summary_text.delta", out, **self._summary(), delta=text)

    def _summary(self) -> dict[str, Any]:
        return {"item_id": self._item_id("rs"), "output_index": len(self._done), "summary_index": 0}

    def _call_delta(self, call: dict[str, Any], out: list[bytes]) -> None:
        index = call.get("index", 0)
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        item = self._calls.get(index)
        if item is None:
            self._close(out)
            call_id = str(call.get("id") or f"call_{index}")
            item = self._calls[index] = self._open = _call_item(
                f"fc_{call_id}", call_id, str(fn.get("name") or ""), "", "in_progress"
            )
            self._emit("response.output_item.added", out, output_index=len(self._done), item=dict(item))
        args = fn.get("arguments")
        if isinstance(args, str) and args and item is self._open:
            item["arguments"] += args
            self._chars[0] += len(args)
            self._chars[1] += 1
            where = {"item_id": item["id"], "output_index": len(self._done)}
            self._emit("response.function_call_arguments.delta", out, **where, delta=args)

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._id}_{len(self._done)}"

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._item_id("msg"), "output_index": len(self._done), "content_index": 0}

    def _close(self, out: list[bytes]) -> None:
        """End the open item with its done events and add it to the output."""
        if self._thought is not None:
            text = "".join(self._thought)
            where = self._summary()
            self._emit("response.reasoning_summary_text.done", out, **where, text=text)
            part = {"type": "summary_text", "text": text}
            self._emit("response.reasoning_summary_part.done", out, **where, part=part)
            item = _reasoning_item(where["item_id"], text)
            self._emit("response.output_item.done", out, output_index=len(self._done), item=item)
            self._done.append(item)
            self._thought = None
        elif self._text is not None:
            text = "".join(self._text)
            where = self._where()
            self._emit("response.output_text.done", out, **where, text=text, logprobs=[])
            part = {"type": "output_text", "text": text, "annotations": []}
            self._emit("response.content_part.done", out, **where, part=part)
            item = _message_item(where["item_id"], text)
            self._emit("response.output_item.done", out, output_index=len(self._done), item=item)
            self._done.append(item)
            self._text = None
        elif self._open is not None:
            item = {**self._open, "status": "completed"}
            where = {"item_id": item["id"], "output_index": len(self._done)}
            self._emit("response.function_call_arguments.done", out, **where, arguments=item["arguments"])
            self._emit("response.output_item.done", out, output_index=len(self._done), item=item)
            self._done.append(item)
            self._open = None

    def _complete(self, out: list[bytes]) -> None:
        self._start({}, out)
        self._close(out)
        response = _response(self._id, self._model, "completed", self._done, _usage(self._usage), self._finish)
        self._emit("response.completed", out, response=response)
        self._ended = True

    def _error(self, error: Any, out: list[bytes]) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or "the upstream stream failed; retry the request")
        code = error.get("code") or "upstream_stream_error"
        self._emit("error", out, code=code, message=message, param=None)
        self._ended = True


__all__ = ["ResponsesEvents", "chat_request", "response_of"]
