"""How a cell of the conformance matrix is walked: the request each feature sends in each client
protocol, and how the body the mock upstream received shows the feature's counterpart.

Test data only: the product never reads this. `matrix.py` holds what each cell must give.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

CLIENTS = ("chat", "responses", "messages")
# dialect link -> (gateway model, upstream model, the protocol the upstream speaks)
LINKS: dict[str, tuple[str, str, str]] = {
    "openai": ("m-openai", "up-openai", "chat"),
    "azure_openai": ("m-azure", "up-azure", "chat"),
    "anthropic": ("m-anthropic", "up-anthropic", "messages"),
    "gemini": ("m-gemini", "gemini-2.5-flash", "gemini"),
    "vertex-gemini": ("m-vx-gemini", "gemini-2.5-flash-002", "gemini"),
    "vertex-claude": ("m-vx-claude", "claude-sonnet-4@20250514", "messages"),
    "bedrock": ("m-bedrock", "anthropic.claude-sonnet-4-20250514-v1:0", "converse"),
    "ollama": ("m-ollama", "up-ollama", "chat"),
}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
TOOL = "zz_lookup"
PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
SCHEMA = {"type": "object", "properties": {"zz_answer": {"type": "string"}}, "required": ["zz_answer"]}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
URL = "https://example.com/zz-image.png"
STOP = "ZZSTOP"
THOUGHT = "Let me think about what is asked."  # what every mock upstream thinks (tools/mock)
SEED = 424242
USER = "zz-user-7"


def _tools(client: str) -> dict[str, Any]:
    if client == "chat":
        return {"tools": [{"type": "function", "function": {"name": TOOL, "parameters": PARAMS}}]}
    if client == "responses":
        return {"tools": [{"type": "function", "name": TOOL, "parameters": PARAMS}]}
    return {"tools": [{"name": TOOL, "input_schema": PARAMS}]}


def _tool_choice(client: str) -> dict[str, Any]:
    choice = {
        "chat": {"type": "function", "function": {"name": TOOL}},
        "responses": {"type": "function", "name": TOOL},
        "messages": {"type": "tool", "name": TOOL},
    }[client]
    return {**_tools(client), "tool_choice": choice}


def _parallel(client: str) -> dict[str, Any]:
    if client == "messages":
        return {**_tools(client), "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    return {**_tools(client), "parallel_tool_calls": False}


def _image(client: str, by_url: bool) -> dict[str, Any]:
    data = f"data:image/png;base64,{PNG}"
    if client == "chat":
        part = {"type": "image_url", "image_url": {"url": URL if by_url else data}}
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, part]}]}
    if client == "responses":
        part = {"type": "input_image", "image_url": URL if by_url else data}
        return {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, part]}]}
    source = {"type": "url", "url": URL} if by_url else {"type": "base64", "media_type": "image/png", "data": PNG}
    content = [{"type": "text", "text": "What is it?"}, {"type": "image", "source": source}]
    return {"messages": [{"role": "user", "content": content}]}


def _json_schema(client: str) -> dict[str, Any] | None:
    if client == "chat":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "zz_out", "schema": SCHEMA}}}
    if client == "responses":
        return {"text": {"format": {"type": "json_schema", "name": "zz_out", "schema": SCHEMA}}}
    return {"output_format": {"type": "json_schema", "schema": SCHEMA}}


def _json_object(client: str) -> dict[str, Any] | None:
    if client == "chat":
        return {"response_format": {"type": "json_object"}}
    if client == "responses":
        return {"text": {"format": {"type": "json_object"}}}
    return None  # Messages has no JSON mode without a schema


def _reasoning(client: str) -> dict[str, Any]:
    if client == "chat":
        return {"reasoning_effort": "low"}
    if client == "responses":
        return {"reasoning": {"effort": "low"}}
    return {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}


def _only(field: dict[str, dict[str, Any]]):  # noqa: ANN202 (a per-client table)
    return lambda client: field.get(client)


# feature -> (the client's fragment by protocol, or None where the protocol has no such field)
FEATURES: dict[str, Any] = {
    "tools": _tools,
    "tool_choice named": _tool_choice,
    "parallel tool calls": _parallel,
    "images data URI": lambda c: _image(c, by_url=False),
    "images by URL": lambda c: _image(c, by_url=True),
    "structured output json_schema": _json_schema,
    "json_object": _json_object,
    "reasoning effort/thinking": _reasoning,
    "stop sequences": _only({"chat": {"stop": [STOP]}, "messages": {"stop_sequences": [STOP]}}),
    "n": _only({"chat": {"n": 2}}),
    "logprobs": _only({"chat": {"logprobs": True, "top_logprobs": 2}, "responses": {"top_logprobs": 2}}),
    "seed": _only({"chat": {"seed": SEED}}),
    "user/metadata": _only(
        {"chat": {"user": USER}, "responses": {"user": USER}, "messages": {"metadata": {"user_id": USER}}}
    ),
    "streaming": lambda _client: {"stream": True},
    "reasoning content back": _reasoning,  # answer-side: the upstream's thoughts reach the client's answer
    "usage: cached tokens back": lambda _client: {},  # answer-side: the upstream's cache reads reach the usage
}


def _claude_answer(upstream: str, thinking: bool, usage: dict[str, int]) -> dict[str, Any]:
    content = [{"type": "thinking", "thinking": THOUGHT, "signature": "sig"}] if thinking else []
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": upstream,
        "content": [*content, {"type": "text", "text": "Hi."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3, **usage},
    }


def script_thoughts(state: Any, upstream: str, protocol: str) -> None:
    """Make the next answer of `upstream` think: the Gemini and Converse mocks think whenever asked to."""
    if protocol == "chat":
        state.model(upstream).steps.append({"reasoning": THOUGHT})
    elif protocol == "messages":
        message = _claude_answer(upstream, thinking=True, usage={})
        state.model(upstream).steps.append({"body": orjson.dumps(message).decode()})


CACHED = 8


def script_cache_reads(state: Any, upstream: str, protocol: str) -> None:
    """Make the next answer of `upstream` report CACHED prompt tokens read from its cache, as its API does."""
    if protocol == "chat":
        usage = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
        step: dict[str, Any] = {"usage": usage | {"prompt_tokens_details": {"cached_tokens": CACHED}}}
    elif protocol == "messages":
        message = _claude_answer(upstream, thinking=False, usage={"cache_read_input_tokens": CACHED})
        step = {"body": orjson.dumps(message).decode()}
    elif protocol == "gemini":
        step = {"cached_tokens": CACHED}
    else:
        step = {"cache_read": CACHED}
    state.model(upstream).steps.append(step)


def cached_back(client: str, answer: dict[str, Any]) -> bool:
    """Whether the client's answer reports the CACHED tokens in its protocol's usage field."""
    usage = answer.get("usage") or {}
    if client == "chat":
        return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") == CACHED
    if client == "responses":
        return (usage.get("input_tokens_details") or {}).get("cached_tokens") == CACHED
    return usage.get("cache_read_input_tokens") == CACHED


def request(client: str, model: str, feature: str) -> dict[str, Any] | None:
    """The client's request exercising `feature`, or None where its protocol has no such field."""
    fragment = FEATURES[feature](client)
    if fragment is None:
        return None
    hello = [{"role": "user", "content": "Hello there"}]
    body: dict[str, Any] = {"model": model}
    if client == "chat":
        body["messages"] = hello
    elif client == "responses":
        body["input"] = hello
    else:
        body |= {"messages": hello, "max_tokens": 256}
    return body | fragment


def _keys(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            found |= _keys(value)
    elif isinstance(node, list):
        for item in node:
            found |= _keys(item)
    return found


# feature -> (marker strings, key names): the upstream body carries the counterpart when it holds any
# marker or any of the key names (whatever its protocol names them)
COUNTERPARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "tools": ((TOOL,), ()),
    "tool_choice named": ((), ("tool_choice", "toolChoice", "allowedFunctionNames")),
    "parallel tool calls": ((), ("parallel_tool_calls", "disable_parallel_tool_use")),
    "images data URI": ((PNG[:40], "iVBORw0KGgo"), ()),
    "images by URL": ((URL,), ()),
    "structured output json_schema": (("zz_answer",), ()),
    "json_object": (("json_object", "application/json", "switchboard_json_output"), ()),
    "reasoning effort/thinking": ((), ("reasoning_effort", "thinking", "thinkingConfig", "reasoning_config")),
    "stop sequences": ((STOP,), ()),
    "n": ((), ("n", "candidateCount")),
    "logprobs": ((), ("logprobs", "top_logprobs", "responseLogprobs", "logprobs")),
    "seed": ((str(SEED),), ()),
    "user/metadata": ((USER,), ()),
    "reasoning content back": ((), ()),  # read from the answer: observe.py
    "usage: cached tokens back": ((), ()),  # read from the answer: observe.py
    "streaming": ((), ()),  # the body's `stream`, or the API's streaming path (Gemini, Converse, Vertex)
}


def reached(feature: str, upstream: dict[str, Any], path: str) -> bool:
    """Whether the request the upstream received (its body, at `path`) carries `feature`'s counterpart."""
    if feature == "streaming":
        return upstream.get("stream") is True or "stream" in path.lower()
    markers, keys = COUNTERPARTS[feature]
    text = json.dumps(upstream)
    return any(m in text for m in markers) or bool(_keys(upstream) & set(keys))


def as_sent(sent: dict[str, Any], upstream: dict[str, Any]) -> bool:
    """Whether every field the client sent reached the upstream unchanged, the model name aside."""
    return all(upstream.get(k) == v for k, v in sent.items() if k != "model")


def refused_param(status: int, raw: bytes) -> str:
    """The parameter a 400 names: the error's `param`, else the first backquoted name in its message."""
    try:
        error = orjson.loads(raw).get("error") or {}
    except orjson.JSONDecodeError:
        return f"?{status}"
    if error.get("param"):
        return str(error["param"])
    message = str(error.get("message", ""))
    quoted = re.search(r"field '([^']+)'", message)
    return quoted.group(1) if quoted else message.split(":")[0]


def dropped(header: str | None) -> list[str]:
    return [part.strip() for part in (header or "").split(",") if part.strip()]
