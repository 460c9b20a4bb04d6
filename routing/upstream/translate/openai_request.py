"""Reading an OpenAI chat request, shared by every dialect that translates one for another API.

The anthropic, bedrock, gemini and vertex translations all walk the same OpenAI fields
(messages and their roles, content parts, image URLs, tool calls, tools, tool_choice,
stop) and must refuse the same bad input with the same `invalid_request` error, whichever
provider serves the model (docs/providers.md). This module reads and checks those fields
once; each translation only builds its own provider's shape from what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson

from routing.core.errors import invalid_request

ROLES_ERROR = "is not one of system, user, assistant, tool"
TOOL_CHOICE_ERROR = "tool_choice must be auto, none, required or a function choice"


def messages_of(raw: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(role, param, message) of each chat message, checked one at a time as the caller goes.

    Lazy on purpose: a caller's error about message 2 still comes before this module's error
    about message 5, as when each translation walked the list itself.
    """
    if not isinstance(raw, list):
        raise invalid_request("messages must be a list of message objects", "messages")
    for i, msg in enumerate(raw):
        param = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise invalid_request(f"{param} must be an object", param)
        role = msg.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise invalid_request(f"{param}.role {role!r} {ROLES_ERROR}", param + ".role")
        yield role, param, msg


def chat_turns(
    raw: Any,
    content_of: Callable[[Any, str], list[Any]],
    call_of: Callable[[Any, str], Any],
    result_of: Callable[[dict[str, Any], str], Any],
) -> tuple[str | None, list[tuple[str, list[Any]]]]:
    """(system text, [(user | assistant | tool, items)]) of the chat messages, in order.

    The caller says how to build its provider's items: `content_of(content, param)` for
    user/assistant content, `call_of(call, param)` for each assistant tool call (after the
    content), `result_of(message, text)` for a tool message's result. It then merges the
    turns as its provider requires (both Anthropic and Gemini alternate roles).
    """
    system: list[str] = []
    turns: list[tuple[str, list[Any]]] = []
    for role, param, msg in messages_of(raw):
        content = msg.get("content")
        if role in ("system", "developer"):
            system.append(text_of(content, param + ".content"))
        elif role == "user":
            turns.append(("user", content_of(content, param + ".content")))
        elif role == "assistant":
            items = content_of(content, param + ".content")
            items.extend(call_of(call, p) for p, call in tool_calls_of(msg, param))
            turns.append(("assistant", items))
        else:
            turns.append(("tool", [result_of(msg, text_of(content, param + ".content"))]))
    return joined_system(system), turns


def joined_system(texts: list[str]) -> str | None:
    """System and developer messages as one instruction (None when all are empty)."""
    return "\n\n".join(s for s in texts if s) or None


def text_of(content: Any, param: str) -> str:
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


def content_list(content: Any, param: str) -> list[Any]:
    """User/assistant content as a list of parts: a string is one text part, None none."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        raise invalid_request(f"{param} must be a string or a list of content parts", param)
    return content


def image_source(part: dict[str, Any], param: str) -> tuple[str | None, str]:
    """(media type, base64 data) of an image_url part with a data: URI, (None, URL) otherwise."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise invalid_request(f"{param}.image_url.url must be a URL or a data: URI", param)
    if not url.startswith("data:"):
        return None, url
    header, _, data = url.partition(",")
    if ";base64" not in header:
        raise invalid_request(f"{param}: only base64 data: URIs are supported for images", param)
    return header[5:].split(";", 1)[0] or "image/png", data


def tool_calls_of(msg: dict[str, Any], param: str) -> list[tuple[str, Any]]:
    """(param, call) of each of an assistant message's `tool_calls`."""
    calls = msg.get("tool_calls") or ()
    if not isinstance(calls, list | tuple):
        raise invalid_request(f"{param}.tool_calls must be a list of tool calls", param + ".tool_calls")
    return [(f"{param}.tool_calls[{j}]", call) for j, call in enumerate(calls)]


def function_call(call: Any, param: str) -> tuple[str, str, dict[str, Any]]:
    """(id, name, arguments parsed to an object) of an OpenAI function tool call."""
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
    return str(call.get("id", "")), str(fn.get("name", "")), args


def function_tools(tools: Any) -> list[dict[str, Any]]:
    """The `function` object of each tool, each checked to have a name."""
    if not isinstance(tools, list):
        raise invalid_request("tools must be a list", "tools")
    functions = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not fn.get("name"):
            raise invalid_request(f"tools[{i}] must be a function tool with a name", f"tools[{i}]")
        functions.append(fn)
    return functions


def tool_choice_of(choice: Any) -> tuple[str, Any] | None:
    """`tool_choice` as (auto | none | required, None) or (function, its name); None when absent."""
    if choice is None:
        return None
    if choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return "function", choice["function"].get("name", "")
    raise invalid_request(TOOL_CHOICE_ERROR, "tool_choice")


def stop_sequences(stop: Any) -> list[str]:
    """`stop` as a list of strings (OpenAI allows a single string)."""
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise invalid_request("stop must be a string or a list of strings", "stop")


def max_tokens_of(body: dict[str, Any]) -> Any:
    """The completion token cap the client asked for (max_completion_tokens wins), if any."""
    return body.get("max_completion_tokens") or body.get("max_tokens")
