"""A Responses API request as a Chat Completions request, for links whose upstream does not speak Responses.

`/v1/responses` on a model served by an `anthropic`, `gemini`, `bedrock`, `vertex` or
`ollama` provider (docs/api.md#responses): the body is turned into the gateway's internal
chat shape here, which the link's dialect then translates to its own API as for any chat
call; the answer comes back through routing.upstream.dialects.responses_answer. Stateless
only: every turn carries its items (`store: false`, as Codex sends them).

Mapped: `instructions` and system/developer items (system messages), user and assistant
messages (text and image parts), `function_call` items (assistant tool calls, consecutive
ones in one message), `function_call_output` items (tool messages), function `tools`,
`tool_choice`, `parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`,
`text.format` (json_schema / json_object), `user` / `safety_identifier`. Dropped (a chat
upstream has no place for them): reasoning items (their text and `encrypted_content` are
the other provider's), `reasoning`, `store`, `include`, `metadata`, `prompt_cache_key`,
`truncation`, `service_tier`, and the tools a chat upstream cannot host (`web_search`,
`file_search`, `code_interpreter`, `namespace` groups, …: offered, never required, so the model
simply does not call them; named in `x-switchboard-dropped`, as Codex CLI offers several on every
turn). Refused, 400 naming the field: `previous_response_id` (no stored state to continue from),
a `tool_choice` that names such a tool, and item or part types with no chat counterpart.
"""

from __future__ import annotations

from typing import Any

from routing.core import errors
from routing.core.errors import GatewayError

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
    `dropped` gets the offered tools a chat upstream cannot host."""
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
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _format(body.get("text"))
    if response_format is not None:
        out["response_format"] = response_format
    if body.get("stream") is True:
        out["stream"] = True
    return out


__all__ = ["chat_request"]
