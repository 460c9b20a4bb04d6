"""The mock upstream's agent turns: what real coding agents (Codex CLI, Claude Code, the agent
SDKs) need from a model to finish a two-turn shell task, in the three wire protocols they speak.

Routes (added to tools.mock.upstream's app), all streamed when the body says `"stream": true`:
  Anthropic  POST /agent/anthropic/v1/messages   (base_url of an `anthropic` provider: /agent/anthropic)
  Responses  POST /agent/v1/responses            (base_url of an `openai` provider: /agent/v1)
  Chat       POST /agent/v1/chat/completions
  Calls      GET /agent/_calls -> {"requests": [{"path", "query", "headers", "body"}]}; POST /agent/_reset

Each request is one turn of a deterministic agent:
- turn 1 (the last turn carries no tool result): reasoning first (a `thinking` block with a
  signature when the request enables thinking; a `reasoning` item with `encrypted_content` when a
  Responses request includes `reasoning.encrypted_content`; a chat message's `reasoning_content`,
  as DeepSeek and vLLM send it, when a chat request sets `reasoning_effort`), then one call of the client's shell
  tool (`Bash`, `exec_command`, `shell`, else the first function offered) running COMMAND;
- turn 2 (the last turn carries the tool's result): the result quoted back as text, so a test can
  see the client ran the command and sent its output.
A request without tools gets a short text answer (titles, summaries, quota probes).
A chat model named in CANNOT_REASON answers 400 to a `reasoning_effort`, as OpenAI's gpt-4o and
many vLLM / llama.cpp models do.

The frames follow the providers' published stream types (Anthropic's `message_start` …
`message_stop`; OpenAI's Responses events with `sequence_number`; chat completion chunks), so
each client first completes its task straight against this mock; the signature and the
encrypted content are derived from the text, so a test can check they came back unchanged.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web

COMMAND = "echo switchboard-agent-ok | tee proof.txt"
THOUGHT = "The user wants a shell command run; I will call the shell tool."
JSON_TYPE = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
CALLS = web.AppKey("agent_calls", deque)
CANNOT_REASON = frozenset({"plain-agent-up"})  # chat models that refuse `reasoning_effort`
# The shell tools of the clients, and the arguments each takes.
SHELL_TOOLS: dict[str, dict[str, Any]] = {
    "Bash": {"command": COMMAND, "description": "Write the proof file"},
    "exec_command": {"cmd": COMMAND},
    "shell": {"command": ["bash", "-lc", COMMAND]},
}


def signature_of(text: str) -> str:
    """The thinking block's signature (and the reasoning item's encrypted content): derived from the text."""
    return "sig-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _tool_call(names: list[str]) -> tuple[str, dict[str, Any]] | None:
    for name, args in SHELL_TOOLS.items():
        if name in names:
            return name, args
    return (names[0], {}) if names else None


def _result_text(content: Any) -> str:
    """The text of a tool result (a string, or text blocks / parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _answer(result: str) -> str:
    return f"The command printed: {result.strip()}" if result.strip() else "Done."


async def _record(request: web.Request) -> dict[str, Any]:
    body = orjson.loads(await request.read())
    request.app[CALLS].append(
        {
            "path": request.path,
            "query": request.query_string,
            "headers": {str(k): v for k, v in request.headers.items()},
            "body": body,
        }
    )
    return body


async def _stream(request: web.Request, frames: Iterator[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    for frame in frames:
        await response.write(frame)
    await response.write_eof()
    return response


# Anthropic Messages ------------------------------------------------------------------------


def _anthropic_turn(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks of this turn and its stop reason."""
    blocks: list[dict[str, Any]] = []
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        blocks.append({"type": "thinking", "thinking": THOUGHT, "signature": signature_of(THOUGHT)})
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    results = (
        [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(last, list) else []
    )
    names = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
    call = _tool_call(names) if names and not results else None
    if call is None:
        text = _answer(_result_text(results[-1].get("content"))) if results else "Hello from the agent mock."
        blocks.append({"type": "text", "text": text})
        return blocks, "end_turn"
    name, args = call
    blocks.append({"type": "tool_use", "id": "toolu_agent_1", "name": name, "input": args})
    return blocks, "tool_use"


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _anthropic_frames(model: str, blocks: list[dict[str, Any]], stop: str) -> Iterator[bytes]:
    usage = {"input_tokens": 40, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": "msg_agent", "type": "message", "role": "assistant", "model": model, "content": []}
    message.update(stop_reason=None, stop_sequence=None, usage=usage)
    yield _event("message_start", {"type": "message_start", "message": message})
    for index, block in enumerate(blocks):
        kind = block["type"]
        empty = {"thinking": {"thinking": "", "signature": ""}, "text": {"text": ""}}.get(kind, {"input": {}})
        start = {"type": kind, **{k: v for k, v in block.items() if k not in ("type", "input")}, **empty}
        yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}]
        for delta in deltas:
            yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 24},
    }
    yield _event("message_delta", end)
    yield _event("message_stop", {"type": "message_stop"})


async def anthropic_messages(request: web.Request) -> web.StreamResponse:
    body = await _record(request)
    blocks, stop = _anthropic_turn(body)
    model = str(body.get("model", ""))
    if body.get("stream"):
        return await _stream(request, _anthropic_frames(model, blocks, stop))
    out = {"id": "msg_agent", "type": "message", "role": "assistant", "model": model, "content": blocks}
    out.update(stop_reason=stop, stop_sequence=None, usage={"input_tokens": 40, "output_tokens": 24})
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


# OpenAI Responses --------------------------------------------------------------------------


def _responses_turn(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of this turn."""
    items = body.get("input")
    items = items if isinstance(items, list) else [{"type": "message", "role": "user", "content": items}]
    last = items[-1] if items and isinstance(items[-1], dict) else {}
    out: list[dict[str, Any]] = []
    if isinstance(body.get("reasoning"), dict) or "reasoning.encrypted_content" in (body.get("include") or []):
        reasoning = {"id": "rs_agent_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": THOUGHT}]}
        if "reasoning.encrypted_content" in (body.get("include") or []):
            reasoning["encrypted_content"] = signature_of(THOUGHT)
        out.append(reasoning)
    names = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    call = _tool_call(names) if names and last.get("type") != "function_call_output" else None
    if call is None:
        text = _answer(_result_text(last.get("output"))) if last.get("type") == "function_call_output" else "Hello."
        part = {"type": "output_text", "text": text, "annotations": []}
        out.append(
            {"id": "msg_agent_1", "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        )
        return out
    name, args = call
    arguments = orjson.dumps(args).decode()
    out.append(
        {"id": "fc_agent_1", "type": "function_call", "status": "completed", "arguments": arguments}
        | {"call_id": "call_agent_1", "name": name}
    )
    return out


def _response(body: dict[str, Any], status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    usage = None
    if status == "completed":
        usage = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 24}
        usage |= {"output_tokens_details": {"reasoning_tokens": 8}, "total_tokens": 64}
    return {
        "id": "resp_agent_1",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.get("model", ""),
        "output": output,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "store": bool(body.get("store", False)),
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of one output item, from added to done (sequence numbers set by the caller)."""
    kind = item["type"]
    if kind == "function_call":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        ids = {"item_id": item["id"], "output_index": index}
        yield {"type": "response.function_call_arguments.delta", **ids, "delta": item["arguments"]}
        yield {"type": "response.function_call_arguments.done", **ids, "arguments": item["arguments"]}
    elif kind == "message":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "content": [], "status": "in_progress"},
        }
        part = item["content"][0]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        yield {"type": "response.content_part.added", **ids, "part": {**part, "text": ""}}
        yield {"type": "response.output_text.delta", **ids, "delta": part["text"], "logprobs": []}
        yield {"type": "response.output_text.done", **ids, "text": part["text"], "logprobs": []}
        yield {"type": "response.content_part.done", **ids, "part": part}
    else:
        yield {"type": "response.output_item.added", "output_index": index, "item": {**item, "summary": []}}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _responses_frames(body: dict[str, Any], output: list[dict[str, Any]]) -> Iterator[bytes]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(body, "in_progress", [])},
        {"type": "response.in_progress", "response": _response(body, "in_progress", [])},
    ]
    for index, item in enumerate(output):
        events.extend(_item_events(index, item))
    events.append({"type": "response.completed", "response": _response(body, "completed", output)})
    for number, data in enumerate(events):
        yield _event(data["type"], {**data, "sequence_number": number})


async def responses(request: web.Request) -> web.StreamResponse:
    body = await _record(request)
    output = _responses_turn(body)
    if body.get("stream"):
        return await _stream(request, _responses_frames(body, output))
    return web.Response(body=orjson.dumps(_response(body, "completed", output)), content_type=JSON_TYPE)


# OpenAI Chat Completions -------------------------------------------------------------------


def _chat_turn(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """(text, tool call or None) of this turn."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
    call = _tool_call([n for n in tools if n]) if tools and last.get("role") != "tool" else None
    if call is None:
        return (_answer(_result_text(last.get("content"))) if last.get("role") == "tool" else "Hello."), None
    name, args = call
    return "", {
        "id": "call_agent_1",
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
    }


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None, usage: Any = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "chatcmpl-agent", "object": "chat.completion.chunk", "created": int(time.time())}
    chunk |= {"model": body.get("model", ""), "choices": [choice] if delta is not None else []}
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _chat_frames(body: dict[str, Any], text: str, call: dict[str, Any] | None) -> Iterator[bytes]:
    yield _chunk(body, {"role": "assistant", "content": ""}, None)
    if body.get("reasoning_effort"):
        yield _chunk(body, {"reasoning_content": THOUGHT}, None)
    if text:
        yield _chunk(body, {"content": text}, None)
    if call is not None:
        yield _chunk(body, {"tool_calls": [{"index": 0, **call}]}, None)
    yield _chunk(body, {}, "tool_calls" if call is not None else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _chunk(body, None, None, {"prompt_tokens": 40, "completion_tokens": 24, "total_tokens": 64})  # type: ignore[arg-type]
    yield b"data: [DONE]\n\n"


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await _record(request)
    if body.get("model") in CANNOT_REASON and "reasoning_effort" in body:
        message = f"Unsupported parameter: 'reasoning_effort' is not supported with the model {body['model']}."
        error = {"message": message, "type": "invalid_request_error", "param": "reasoning_effort"}
        return web.Response(status=400, body=orjson.dumps({"error": error}), content_type=JSON_TYPE)
    text, call = _chat_turn(body)
    if body.get("stream"):
        return await _stream(request, _chat_frames(body, text, call))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if body.get("reasoning_effort"):
        message["reasoning_content"] = THOUGHT
    if call is not None:
        message["tool_calls"] = [call]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if call is not None else "stop"}
    out = {
        "id": "chatcmpl-agent",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
    }
    out |= {"choices": [choice], "usage": {"prompt_tokens": 40, "completion_tokens": 24, "total_tokens": 64}}
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


async def calls(request: web.Request) -> web.StreamResponse:
    return web.Response(body=orjson.dumps({"requests": list(request.app[CALLS])}), content_type=JSON_TYPE)


async def reset(request: web.Request) -> web.StreamResponse:
    request.app[CALLS].clear()
    return web.Response(body=b"{}", content_type=JSON_TYPE)


def add_routes(app: web.Application) -> None:
    app[CALLS] = deque(maxlen=200)
    app.router.add_post("/agent/anthropic/v1/messages", anthropic_messages)
    app.router.add_post("/agent/v1/responses", responses)
    app.router.add_post("/agent/v1/chat/completions", chat_completions)
    app.router.add_get("/agent/_calls", calls)
    app.router.add_post("/agent/_reset", reset)
