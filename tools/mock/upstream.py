"""A fast, scriptable mock upstream speaking every dialect (tests, demo, benchmark).

Independent of Django: `python -m tools.mock.upstream --port 9001` runs it, and so
does `manage.py run_mock_upstream --port 9001`; tests use `await start_mock()`.

Routes (listening on 127.0.0.1):
  OpenAI      POST /v1/chat/completions (SSE when "stream": true), /v1/completions, /v1/embeddings,
              /v1/rerank, /v1/responses; GET /v1/models
  Anthropic   POST /anthropic/v1/messages (SSE events when "stream": true)
  TEI         POST /tei/embed, /tei/rerank; GET /tei/health   (model key: "tei")
  Cohere      POST /cohere/v2/rerank, /cohere/v2/embed
  Azure, Gemini, Vertex (and its token endpoint): tools.mock.clouds
  Bedrock     POST /bedrock/model/{modelId}/converse, /converse-stream (SigV4 checked;
              tools.mock.bedrock)
  Agents      POST /agent/anthropic/v1/messages, /agent/v1/responses, /agent/v1/chat/completions
              (a deterministic two-turn shell task; tools.mock.agents)
  Control     POST /_control/script, GET /_control/calls?model=M, POST /_control/reset

Chat (OpenAI and Anthropic) calls the first tool offered, after its text, unless the
last turn already carries a tool result (or tool_choice is none). A forced call (Anthropic's
tool_choice `tool` or `any`, Bedrock's `toolChoice`, Gemini's mode ANY) comes without text and
its input is a value of the tool's schema, as is Gemini's JSON answer to a `responseSchema`
(tools.mock.schema_values: seeded by the request, so structured-output clients get valid JSON).

Faults are scripted per upstream model name (the body's "model"; TEI has none, so
its key is "tei"): POST /_control/script {"model": "m1", "steps": [{"status": 500},
{"status": 429, "headers": {"Retry-After": "1"}}, {}], "then": {"status": 503}}.
Each request of that model consumes one step; when they run out, `then` applies
(default: a normal 200). A script with "when": {"field": F, "equals": V} (a top-level
body field, e.g. "user") or {"header": H, "equals": V} applies only to the requests that
match it, next to the model's other scripts: the gateway's org-isolation tests fail one
caller's requests only. {"model": M, "capacity": C, "over": STEP} gives the model a hard
capacity: a request that finds C already in flight gets STEP (default {"status": 429});
`over_capacity` in /_control/calls counts them. Step fields: status, headers, body (raw string), delay_ms
(before headers), hang (never answer), empty_stream (200 SSE, no frames), frames,
frame_delay_ms, first_frame_delay_ms, break_after (abort the connection after k
frames), no_done (end cleanly without the terminator), invalid_json (2xx non-JSON),
no_usage (never send the usage frame, as some servers do not), role_chunk (false: no role-only first chunk; OpenAI chat streams send one by default,
as OpenAI and the OpenAI-compatible servers do). OpenAI chat only: usage (the answer's and the stream's usage frame,
e.g. with `prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`), reasoning (text the
model reasoned before answering: the message's `reasoning_content`, streamed as `reasoning_content` deltas ahead of the
text, as DeepSeek and vLLM send it) and reasoning_field (`"reasoning"`: that field's name as OpenRouter and Ollama spell it).

{"model": M, "prompt_cache": true} gives the model a prompt cache of its own, as a provider's
deployment has: a non-streamed OpenAI chat answer then reports `prompt_tokens` (the messages'
JSON length / 4) and `prompt_tokens_details.cached_tokens` = the tokens of the longest message
prefix this model has seen before (0 the first time), so a test can measure the cached-input
ratio one conversation gets over several deployments; `cache_hits` in /_control/calls counts
the requests that had one.

GET /_control/calls answers {"count", "disconnected", "disconnected_at", "in_flight", "requests":
[{"path", "headers", "body", "peer"}]} (the last 200 requests), so tests can assert
what the gateway sent (BYO keys, translated bodies), that it hung up on cancellation
("disconnected": requests whose client went away before the answer was complete;
"disconnected_at": when, on this machine's time.monotonic() clock, so a test can time it)
and whether it reused a connection ("peer": the client's address and port).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import socket
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from tools.mock import agents, bedrock, clouds, schema_values

HOST = "127.0.0.1"
RECORD_LIMIT = 200
TEI_KEY = "tei"
TEXT = "Hello from the mock upstream."
CREATED = 1_700_000_000
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
JSON_TYPE = "application/json"


# --- state ---------------------------------------------------------------------------


class ModelState:
    """What happened to one upstream model name, and what it should do next."""

    __slots__ = (
        "count",
        "requests",
        "disconnected",
        "disconnected_at",
        "in_flight",
        "steps",
        "then",
        "rules",
        "capacity",
        "over",
        "over_capacity",
        "prompt_cache",
        "cache_hits",
    )

    def __init__(self) -> None:
        self.count = 0
        self.requests: deque[tuple[str, Any, bytes, Any]] = deque(maxlen=RECORD_LIMIT)
        self.disconnected = 0
        self.disconnected_at: deque[float] = deque(maxlen=RECORD_LIMIT)  # time.monotonic() of each hang-up
        self.in_flight = 0
        self.steps: deque[dict[str, Any]] = deque()
        self.then: dict[str, Any] | None = None
        # conditional scripts: (("field"|"header", name, value), steps, then)
        self.rules: list[tuple[tuple[str, str, Any], deque[dict[str, Any]], dict[str, Any] | None]] = []
        # a hard capacity: a request beyond `capacity` concurrent gets the `over` step (default a 429)
        self.capacity: int | None = None
        self.over: dict[str, Any] = {"status": 429}
        self.over_capacity = 0
        self.prompt_cache: set[bytes] | None = None  # digests of the message prefixes seen; None: no cache
        self.cache_hits = 0

    def next_step(self, body: dict[str, Any] | None = None, headers: Any = None) -> dict[str, Any] | None:
        for (kind, name, value), steps, then in self.rules:
            got = (body or {}).get(name) if kind == "field" else (headers or {}).get(name)
            if got == value:
                return steps.popleft() if steps else then
        return self.steps.popleft() if self.steps else self.then


class MockState:
    def __init__(self) -> None:
        self.models: dict[str, ModelState] = {}
        self._changed = asyncio.Event()
        self._watchers = 0

    def model(self, name: str) -> ModelState:
        state = self.models.get(name)
        if state is None:
            state = self.models[name] = ModelState()
        return state

    def notify(self) -> None:
        if self._watchers:  # keep the no-watcher fast path allocation-free
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait (bounded) until predicate() holds; re-checked whenever a request starts or ends."""
        self._watchers += 1
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    await self._changed.wait()
        finally:
            self._watchers -= 1

    async def wait_disconnected(self, model: str, count: int = 1, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: self.model(model).disconnected >= count, timeout)

    def calls(self, name: str) -> dict[str, Any]:
        state = self.model(name)
        requests = []
        for path, headers, body, peer in state.requests:
            try:
                decoded: Any = orjson.loads(body) if body else None
            except orjson.JSONDecodeError:
                decoded = body.decode("utf-8", "replace")
            requests.append(
                {
                    "path": path,
                    "headers": {str(k): v for k, v in headers.items()},
                    "body": decoded,
                    "peer": f"{peer[0]}:{peer[1]}" if peer else None,
                }
            )
        return {
            "count": state.count,
            "disconnected": state.disconnected,
            "disconnected_at": list(state.disconnected_at),
            "in_flight": state.in_flight,
            "over_capacity": state.over_capacity,
            "cache_hits": state.cache_hits,
            "requests": requests,
        }


STATE = web.AppKey("mock_state", MockState)


# --- precomputed answers (the benchmark's fast path) -----------------------------------


def _split(template: dict[str, Any]) -> tuple[bytes, bytes]:
    """Template JSON split around the "model" value, so answers are prefix+model+suffix."""
    raw = orjson.dumps(template)
    marker = b'"@@MODEL@@"'
    head, _, tail = raw.partition(marker)
    return head, tail


CHAT = _split(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": CREATED,
        "model": "@@MODEL@@",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": TEXT}, "logprobs": None, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
)
RESPONSES = _split(
    {
        "id": "resp_mock",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": "@@MODEL@@",
        "output": [
            {
                "type": "message",
                "id": "msg_mock",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
    }
)
CHUNK = _split(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "@@MODEL@@",
        "choices": [{"index": 0, "delta": {"content": "@@TEXT@@"}, "logprobs": None, "finish_reason": None}],
    }
)
# What OpenAI and every OpenAI-compatible server send first: the role, before any token.
ROLE_CHUNK = _split(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "@@MODEL@@",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        ],
    }
)
FINAL_CHUNK = _split(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "@@MODEL@@",
        "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
    }
)
USAGE_CHUNK = _split(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "@@MODEL@@",
        "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
)
DONE = b"data: [DONE]\n\n"
VECTOR = [0.125, -0.25, 0.5, 0.0625, 1.0, -0.5, 0.25, 0.75]
OPENAI_ERROR = {"error": {"message": "mock upstream failure", "type": "server_error", "code": None, "param": None}}
ANTHROPIC_ERROR = {"type": "error", "error": {"type": "api_error", "message": "mock upstream failure"}}


def _chat_body(model: bytes) -> bytes:
    return CHAT[0] + model + CHAT[1]


def _chunk(model: bytes, text: str) -> bytes:
    head, tail = CHUNK
    return b"data: " + head + model + tail.replace(b"@@TEXT@@", orjson.dumps(text)[1:-1], 1) + b"\n\n"


def _frame(parts: tuple[bytes, bytes], model: bytes) -> bytes:
    return b"data: " + parts[0] + model + parts[1] + b"\n\n"


def _score(query: str, doc: str, index: int) -> float:
    """Deterministic relevance: word overlap, ties broken by position."""
    q = set(query.lower().split())
    words = doc.lower().split()
    overlap = sum(1 for w in words if w in q)
    return round(overlap / (len(words) or 1) + 0.001 / (index + 1), 6)


def _ranked(query: str, docs: list[Any], top_n: Any) -> list[dict[str, Any]]:
    texts = [d.get("text", "") if isinstance(d, dict) else str(d) for d in docs]
    results = [{"index": i, "relevance_score": _score(query, t, i)} for i, t in enumerate(texts)]
    results.sort(key=lambda r: r["relevance_score"], reverse=True)
    return results[:top_n] if isinstance(top_n, int) else results


def _tokens(inputs: Any) -> int:
    items = inputs if isinstance(inputs, list) else [inputs]
    return sum(len(str(x).split()) or 1 for x in items)


# --- request handling ------------------------------------------------------------------

Handler = Callable[[web.Request, dict[str, Any], bytes, dict[str, Any] | None], Awaitable[web.StreamResponse]]


def _route(
    model_of: Callable[[dict[str, Any]], str],
    dialect: str,
    answer: Handler,
    *,
    path_model: Callable[[web.Request], str] | None = None,
    check: Callable[[web.Request, dict[str, Any]], web.StreamResponse | None] | None = None,
    error: Callable[[int], bytes] | None = None,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap a dialect answer with recording, scripted faults and disconnect tracking.

    APIs that name the model in the URL give `path_model`; `check` (auth, required fields)
    may refuse a recorded request before any script; `error` is the API's error body for a
    scripted status without a body (tools.mock.clouds).
    """

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            return web.Response(
                status=400, body=orjson.dumps({"error": {"message": "mock: body is not JSON"}}), content_type=JSON_TYPE
            )
        if not isinstance(body, dict):
            body = {"_": body}
        state: MockState = request.app[STATE]
        name = model_of(body) if path_model is None else path_model(request)
        ms = state.model(name)
        ms.count += 1
        transport = request.transport
        ms.requests.append(
            (request.path, request.headers, raw, transport.get_extra_info("peername") if transport else None)
        )
        if check is not None and (denied := check(request, body)) is not None:
            return denied
        step = ms.next_step(body, request.headers) if ms.rules else ms.next_step()
        if ms.prompt_cache is not None and isinstance(body.get("messages"), list):
            step = {**(step or {}), "usage": _cached_usage(ms, body["messages"])}
        ms.in_flight += 1
        if ms.capacity is not None and ms.in_flight > ms.capacity:
            step = ms.over
            ms.over_capacity += 1
        state.notify()
        try:
            if step is None:
                return await answer(request, body, orjson.dumps(name), None)
            return await _scripted(request, body, name, step, dialect, answer, error)
        except (asyncio.CancelledError, ConnectionResetError):
            ms.disconnected += 1
            ms.disconnected_at.append(time.monotonic())
            raise
        finally:
            ms.in_flight -= 1
            state.notify()

    return handle


async def _scripted(
    request: web.Request,
    body: dict[str, Any],
    name: str,
    step: dict[str, Any],
    dialect: str,
    answer: Handler,
    error: Callable[[int], bytes] | None = None,
) -> web.StreamResponse:
    if step.get("delay_ms"):
        await asyncio.sleep(step["delay_ms"] / 1000)
    if step.get("hang"):
        await asyncio.sleep(3600)  # until the client hangs up (handler cancellation)
    status = int(step.get("status", 200))
    headers = dict(step.get("headers") or {})
    if status >= 300:
        if "body" in step:
            payload = str(step["body"]).encode()
        elif error is not None:
            payload = error(status)
        else:
            payload = orjson.dumps(ANTHROPIC_ERROR if dialect == "anthropic" else OPENAI_ERROR)
        headers.setdefault("Content-Type", JSON_TYPE)
        return web.Response(status=status, body=payload, headers=headers)
    if step.get("invalid_json"):
        headers.setdefault("Content-Type", JSON_TYPE)
        return web.Response(status=status, body=b"<html>this is not JSON", headers=headers)
    if "body" in step:
        headers.setdefault("Content-Type", JSON_TYPE)
        return web.Response(status=status, body=str(step["body"]).encode(), headers=headers)
    return await answer(request, body, orjson.dumps(name), step)


async def _sse(
    request: web.Request,
    frames: list[bytes],
    terminator: bytes,
    step: dict[str, Any] | None,
    preamble: bytes = b"",
) -> web.StreamResponse:
    """Write SSE frames as scripted: delays, empty, abrupt break, missing terminator.

    `preamble` (OpenAI's role-only first chunk) goes out at once, before any delay, and
    is not counted by `frames` or `break_after`; a step with "role_chunk": false omits it.
    """
    step = step or {}
    resp = web.StreamResponse(
        status=int(step.get("status", 200)), headers={**SSE_HEADERS, **(step.get("headers") or {})}
    )
    await resp.prepare(request)
    if step.get("empty_stream"):
        await resp.write_eof()
        return resp
    if preamble and step.get("role_chunk", True):
        await resp.write(preamble)
    first_delay = step.get("first_frame_delay_ms")
    delay = step.get("frame_delay_ms")
    break_after = step.get("break_after")
    for i, frame in enumerate(frames):
        if break_after is not None and i >= break_after:
            return _abort(request, resp)
        if i == 0 and first_delay:
            await asyncio.sleep(first_delay / 1000)
        elif i > 0 and delay:
            await asyncio.sleep(delay / 1000)
        await resp.write(frame)
    if break_after is not None:
        return _abort(request, resp)
    if not step.get("no_done"):
        await resp.write(terminator)
    await resp.write_eof()
    return resp


def _abort(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """Drop the TCP connection mid-body: the client sees a broken stream, not an end."""
    if request.transport is not None:
        request.transport.abort()
    return resp


# OpenAI ----------------------------------------------------------------------------------


def _model_of(body: dict[str, Any]) -> str:
    return str(body.get("model") or "")


def _wants_openai_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The function to call: the first one offered, unless the last message is already a tool result."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or body.get("tool_choice") == "none":
        return None
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
        return None
    fn = tools[0].get("function") if isinstance(tools[0], dict) else None
    return fn if isinstance(fn, dict) else {}


def _tool_chunk(model: bytes, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = orjson.loads(_frame(FINAL_CHUNK, model)[6:])
    chunk["choices"][0].update(delta={"tool_calls": [delta]} if delta else {}, finish_reason=finish)
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def _openai_chat(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    tool = _wants_openai_tool(body)
    step = step or {}
    reasoning, field = step.get("reasoning"), str(step.get("reasoning_field") or "reasoning_content")
    if not body.get("stream"):
        if tool is None and not ("usage" in step or reasoning):
            return web.Response(body=_chat_body(model), content_type=JSON_TYPE)
        out = orjson.loads(_chat_body(model))
        if "usage" in step:
            out["usage"] = step["usage"]
        if reasoning:
            out["choices"][0]["message"][field] = reasoning
        if tool is None:
            return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)
        call = {
            "id": "call_mock1",
            "type": "function",
            "function": {"name": tool.get("name", ""), "arguments": '{"query": "mock"}'},
        }
        out["choices"][0]["message"]["tool_calls"] = [call]
        out["choices"][0]["finish_reason"] = "tool_calls"
        return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)
    count = int(step.get("frames", 3))
    frames = _reasoning_chunks(model, reasoning, field) + [_chunk(model, f"tok{i} ") for i in range(count)]
    if tool is None:
        frames.append(_frame(FINAL_CHUNK, model))
    else:  # one call: id and name first, then the arguments in two pieces, as OpenAI streams them
        start = {
            "index": 0,
            "id": "call_mock1",
            "type": "function",
            "function": {"name": tool.get("name", ""), "arguments": ""},
        }
        frames.append(_tool_chunk(model, start))
        for part in ('{"query": ', '"mock"}'):
            frames.append(_tool_chunk(model, {"index": 0, "function": {"arguments": part}}))
        frames.append(_tool_chunk(model, {}, "tool_calls"))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and not step.get("no_usage"):
        frames.append(_usage_chunk(model, step.get("usage")))
    return await _sse(request, frames, DONE, step, _frame(ROLE_CHUNK, model))


def _reasoning_chunks(model: bytes, reasoning: Any, field: str) -> list[bytes]:
    """The reasoning text as two deltas of `field` (no `content`), before the answer's text."""
    if not isinstance(reasoning, str) or not reasoning:
        return []
    half = len(reasoning) // 2
    out = []
    for piece in (reasoning[:half], reasoning[half:]):
        chunk = orjson.loads(_frame(FINAL_CHUNK, model)[6:])
        chunk["choices"][0].update(delta={field: piece}, finish_reason=None)
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    return out


def _usage_chunk(model: bytes, usage: Any) -> bytes:
    """The last chunk, `choices: []` and the usage (the scripted one, when a step gives it)."""
    if not isinstance(usage, dict):
        return _frame(USAGE_CHUNK, model)
    chunk = orjson.loads(_frame(USAGE_CHUNK, model)[6:])
    chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def _openai_completions(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    """Legacy text completions: `text_completion` objects, streamed as `choices[].text` chunks."""
    name = orjson.loads(model)
    usage = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}

    def completion(text: str, finish: str | None, **extra: Any) -> dict[str, Any]:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
        return {
            "id": "cmpl-mock",
            "object": "text_completion",
            "created": CREATED,
            "model": name,
            "choices": [choice],
            **extra,
        }

    if not body.get("stream"):
        return web.Response(body=orjson.dumps(completion(TEXT, "stop", usage=usage)), content_type=JSON_TYPE)
    count = int((step or {}).get("frames", 3))
    chunks = [completion(f"tok{i} ", None) for i in range(count)] + [completion("", "stop")]
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and not (step or {}).get("no_usage"):
        chunks.append({**completion("", None), "choices": [], "usage": usage})
    return await _sse(request, [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks], DONE, step)


async def _openai_embeddings(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    inputs = body.get("input")
    items = inputs if isinstance(inputs, list) else [inputs]
    tokens = _tokens(inputs)
    out = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": VECTOR} for i in range(len(items))],
        "model": orjson.loads(model),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


async def _openai_rerank(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    docs = body.get("documents") or []
    out = {
        "id": "rerank-mock",
        "model": orjson.loads(model),
        "results": _ranked(str(body.get("query", "")), docs, body.get("top_n")),
        "usage": {"prompt_tokens": _tokens(docs), "total_tokens": _tokens(docs)},
    }
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


async def _openai_responses(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    if body.get("stream") is True:
        frames = _responses_events(orjson.loads(model), body, int((step or {}).get("frames", 3)))
        return await _sse(request, frames[:-1], frames[-1], step)
    return web.Response(body=RESPONSES[0] + model + RESPONSES[1], content_type=JSON_TYPE)


def _wants_responses_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The function tool to call: the first offered, unless the input ends with its output already."""
    tools = [t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    items = body.get("input")
    last = items[-1] if isinstance(items, list) and items else {}
    if not tools or (isinstance(last, dict) and last.get("type") == "function_call_output"):
        return None
    return tools[0]


def _responses_events(name: str, body: dict[str, Any], count: int) -> list[bytes]:
    """OpenAI's Responses event stream (as the official SDK's types have it): created, in_progress, a
    message item's added / part / text deltas / done events, a function call's when a tool is offered,
    then response.completed with every done item. The last frame is the terminator (no [DONE])."""
    seq = iter(range(1 << 20))
    out: list[bytes] = []

    def emit(kind: str, **data: Any) -> None:
        out.append(_event(kind, {"type": kind, "sequence_number": next(seq), **data}))

    response: dict[str, Any] = {
        "id": "resp_mock",
        "object": "response",
        "created_at": CREATED,
        "status": "in_progress",
        "model": name,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }
    emit("response.created", response=dict(response))
    emit("response.in_progress", response=dict(response))
    text = "".join(f"tok{i} " for i in range(count))
    message = {"id": "msg_mock", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    emit("response.output_item.added", output_index=0, item=dict(message))
    part = {"type": "output_text", "text": "", "annotations": []}
    where = {"item_id": "msg_mock", "output_index": 0, "content_index": 0}
    emit("response.content_part.added", **where, part=part)
    for i in range(count):
        emit("response.output_text.delta", **where, delta=f"tok{i} ", logprobs=[])
    emit("response.output_text.done", **where, text=text, logprobs=[])
    done_part = {**part, "text": text}
    emit("response.content_part.done", **where, part=done_part)
    done = [{**message, "status": "completed", "content": [done_part]}]
    emit("response.output_item.done", output_index=0, item=done[0])
    tool = _wants_responses_tool(body)
    if tool is not None:
        args = '{"query": "mock"}'
        call = {"id": "fc_mock", "type": "function_call", "status": "in_progress", "call_id": "call_mock1"}
        call.update(name=str(tool.get("name", "")), arguments="")
        emit("response.output_item.added", output_index=1, item=dict(call))
        for piece in ('{"query": ', '"mock"}'):
            emit("response.function_call_arguments.delta", item_id="fc_mock", output_index=1, delta=piece)
        emit("response.function_call_arguments.done", item_id="fc_mock", output_index=1, arguments=args)
        done.append({**call, "status": "completed", "arguments": args})
        emit("response.output_item.done", output_index=1, item=done[1])
    usage = {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}
    usage.update(input_tokens_details={"cached_tokens": 0}, output_tokens_details={"reasoning_tokens": 0})
    emit("response.completed", response={**response, "status": "completed", "output": done, "usage": usage})
    return out


async def _models(request: web.Request) -> web.StreamResponse:
    names = sorted(n for n in request.app[STATE].models if n and n != TEI_KEY) or ["mock-model"]
    out = {
        "object": "list",
        "data": [{"id": n, "object": "model", "created": CREATED, "owned_by": "mock"} for n in names],
    }
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


# Anthropic -------------------------------------------------------------------------------


def _wants_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The tool to call: the one `tool_choice` names, else the first one offered, unless the last turn
    already carries a result."""
    tools = body.get("tools")
    choice = body.get("tool_choice") or {}
    if not tools or choice.get("type") == "none":
        return None
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = last.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    named = [t for t in tools if choice.get("type") == "tool" and t.get("name") == choice.get("name")]
    return named[0] if named else tools[0]


def _text_frames(count: int) -> list[bytes]:
    """A text block of `count` deltas at index 0 (the stream's ping after its start, as Anthropic sends it)."""
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    frames = [_event("content_block_start", start), _event("ping", {"type": "ping"})]
    for i in range(count):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"tok{i} "}}
        frames.append(_event("content_block_delta", delta))
    frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return frames


def _forced(body: dict[str, Any]) -> bool:
    """A forced tool_choice (`any`, `tool`): Anthropic prefills the turn, so no text comes before the call."""
    return (body.get("tool_choice") or {}).get("type") in ("any", "tool")


def _tool_input(tool: dict[str, Any], body: dict[str, Any]) -> Any:
    """A forced call's input fits the tool's schema, as a model's structured answer does (tools.mock.schema_values);
    a call the model chose answers {"query": "mock"}."""
    if not _forced(body):
        return {"query": "mock"}
    return schema_values.answer_for(tool.get("input_schema"), body)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _tool_schema_problem(body: dict[str, Any]) -> str | None:
    """What Anthropic's Messages API refuses in a custom tool's `input_schema` (400 `invalid_request_error`):
    it must be a JSON object whose `type` is "object". A server tool (a `type` such as "web_search_20250305",
    no schema) is not checked."""
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if not isinstance(tool, dict) or "input_schema" not in tool:
            continue
        schema = tool["input_schema"]
        if not isinstance(schema, dict):
            return f"tools.{i}.custom.input_schema: Input should be a valid dictionary"
        if "type" not in schema:
            return f"tools.{i}.custom.input_schema.type: Field required"
        if schema["type"] != "object":
            return f"tools.{i}.custom.input_schema.type: Input should be 'object'"
    return None


async def _anthropic_messages(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    problem = _tool_schema_problem(body)
    if problem is not None:
        refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}
        return web.Response(status=400, body=orjson.dumps(refusal), content_type=JSON_TYPE)
    name = orjson.loads(model)
    tool = _wants_tool(body)
    usage_in = 12
    if not body.get("stream"):
        content: list[dict[str, Any]] = [] if tool is not None and _forced(body) else [{"type": "text", "text": TEXT}]
        if tool is not None:
            content.append(
                {
                    "type": "tool_use",
                    "id": "toolu_mock1",
                    "name": tool.get("name", ""),
                    "input": _tool_input(tool, body),
                }
            )
        out = {
            "id": "msg_mock",
            "type": "message",
            "role": "assistant",
            "model": name,
            "content": content,
            "stop_reason": "tool_use" if tool is not None else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 7},
        }
        return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)
    count = int((step or {}).get("frames", 3))
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_mock",
            "type": "message",
            "role": "assistant",
            "model": name,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1},
        },
    }
    text = not (tool is not None and _forced(body))  # a forced tool call comes without text first
    # the order Anthropic sends: message_start, the first block's start, a ping, then the deltas
    frames = [_event("message_start", start), *(_text_frames(count) if text else [_event("ping", {"type": "ping"})])]
    if tool is not None:
        block = {"type": "tool_use", "id": "toolu_mock1", "name": tool.get("name", ""), "input": {}}
        index = 1 if text else 0
        frames.append(
            _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        )
        parts = schema_values.halves(_tool_input(tool, body)) if _forced(body) else ('{"query": ', '"mock"}')
        for part in parts:
            delta = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": part},
            }
            frames.append(_event("content_block_delta", delta))
        frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = "tool_use" if tool is not None else "end_turn"
    frames.append(
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
        )
    )
    return await _sse(request, frames, _event("message_stop", {"type": "message_stop"}), step)


# TEI and Cohere --------------------------------------------------------------------------


async def _tei_embed(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    inputs = body.get("inputs")
    items = inputs if isinstance(inputs, list) else [inputs]
    return web.Response(body=orjson.dumps([VECTOR for _ in items]), content_type=JSON_TYPE)


async def _tei_rerank(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    ranked = _ranked(str(body.get("query", "")), body.get("texts") or [], None)
    return web.Response(
        body=orjson.dumps([{"index": r["index"], "score": r["relevance_score"]} for r in ranked]),
        content_type=JSON_TYPE,
    )


async def _tei_health(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"")


async def _cohere_rerank(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    out = {
        "id": "cohere-rerank-mock",
        "results": _ranked(str(body.get("query", "")), body.get("documents") or [], body.get("top_n")),
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
    }
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


async def _cohere_embed(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    texts = body.get("texts") or []
    out = {
        "id": "cohere-embed-mock",
        "embeddings": {"float": [VECTOR for _ in texts]},
        "texts": texts,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": _tokens(texts)}},
    }
    return web.Response(body=orjson.dumps(out), content_type=JSON_TYPE)


# control ---------------------------------------------------------------------------------


def _bad(message: str) -> web.Response:
    return web.Response(status=400, body=orjson.dumps({"error": {"message": message}}), content_type=JSON_TYPE)


async def _control_script(request: web.Request) -> web.StreamResponse:
    try:
        spec = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _bad("script body must be JSON")
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), str):
        return _bad('script needs {"model": NAME, "steps": [...], "then": {...}?}')
    steps = spec.get("steps") or []
    then = spec.get("then")
    if (
        not isinstance(steps, list)
        or not all(isinstance(s, dict) for s in steps)
        or not (then is None or isinstance(then, dict))
    ):
        return _bad("steps must be a list of objects and then an object")
    ms = request.app[STATE].model(spec["model"])
    when = spec.get("when")
    if when is not None:
        kinds = [k for k in ("field", "header") if isinstance(when, dict) and isinstance(when.get(k), str)]
        if len(kinds) != 1 or "equals" not in when:
            return _bad('when must be {"field": NAME, "equals": VALUE} or {"header": NAME, "equals": VALUE}')
        rule = (kinds[0], when[kinds[0]], when["equals"])
        ms.rules = [r for r in ms.rules if r[0] != rule]
        ms.rules.append((rule, deque(steps), then))
        return web.Response(body=orjson.dumps({"model": spec["model"], "steps": len(steps)}), content_type=JSON_TYPE)
    ms.steps = deque(steps)
    ms.then = then
    if spec.get("prompt_cache") is True:
        ms.prompt_cache = set()
    capacity = spec.get("capacity")
    if capacity is not None:
        if not isinstance(capacity, int) or capacity < 1:
            return _bad("capacity must be a whole number of concurrent requests, at least 1")
        over = spec.get("over")
        ms.capacity, ms.over = capacity, over if isinstance(over, dict) else {"status": 429}
    return web.Response(body=orjson.dumps({"model": spec["model"], "steps": len(steps)}), content_type=JSON_TYPE)


def _cached_usage(ms: ModelState, messages: list[Any]) -> dict[str, Any]:
    """The usage of a chat call to a model with a prompt cache: its longest message prefix seen before is
    read from the cache; every prefix of this call is in the cache from now on."""
    seen = ms.prompt_cache
    assert seen is not None
    cached = 0
    for i in range(1, len(messages) + 1):
        head = orjson.dumps(messages[:i])
        digest = hashlib.blake2b(head, digest_size=16).digest()
        if digest in seen:
            cached = len(head) // 4
        seen.add(digest)
    prompt = max(len(orjson.dumps(messages)) // 4, 1)
    if cached:
        ms.cache_hits += 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 7,
        "total_tokens": prompt + 7,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


async def _control_calls(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=orjson.dumps(request.app[STATE].calls(request.query.get("model", ""))), content_type=JSON_TYPE
    )


async def _control_reset(request: web.Request) -> web.StreamResponse:
    request.app[STATE].models.clear()
    return web.Response(body=b'{"reset": true}', content_type=JSON_TYPE)


# app -------------------------------------------------------------------------------------


def make_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = MockState()
    tei = lambda _body: TEI_KEY  # noqa: E731 (TEI requests name no model)
    app.router.add_post("/v1/chat/completions", _route(_model_of, "openai", _openai_chat))
    app.router.add_post("/v1/embeddings", _route(_model_of, "openai", _openai_embeddings))
    app.router.add_post("/v1/completions", _route(_model_of, "openai", _openai_completions))
    app.router.add_post("/v1/rerank", _route(_model_of, "openai", _openai_rerank))
    app.router.add_post("/v1/responses", _route(_model_of, "openai", _openai_responses))
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/anthropic/v1/messages", _route(_model_of, "anthropic", _anthropic_messages))
    app.router.add_get("/anthropic/v1/models", _models)
    app.router.add_post("/tei/embed", _route(tei, "tei", _tei_embed))
    app.router.add_post("/tei/rerank", _route(tei, "tei", _tei_rerank))
    app.router.add_get("/tei/health", _tei_health)
    app.router.add_post("/cohere/v2/rerank", _route(_model_of, "cohere", _cohere_rerank))
    app.router.add_post("/cohere/v2/embed", _route(_model_of, "cohere", _cohere_embed))
    app.router.add_get("/cohere/v2/models", _models)
    clouds.add_routes(app, sys.modules[__name__])  # its handlers build on this module's
    bedrock.add_routes(app, _route, STATE)
    agents.add_routes(app)  # the turns real agent clients need (tests/e2e/test_agent_clients.py)
    app.router.add_post("/_control/script", _control_script)
    app.router.add_get("/_control/calls", _control_calls)
    app.router.add_post("/_control/reset", _control_reset)
    return app


async def start_mock(port: int = 0, host: str = HOST) -> tuple[web.AppRunner, int]:
    """Start the mock on this loop; returns (runner, bound port). `await runner.cleanup()` stops it.

    Handler cancellation is on, so a client hang-up cancels the handler and is counted.
    """
    runner = web.AppRunner(make_app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    return runner, runner.addresses[0][1]


def state_of(runner: web.AppRunner) -> MockState:
    return runner.app[STATE]


# blackhole -------------------------------------------------------------------------------


class Blackhole:
    """A loopback (host, port) where TCP connect never completes (for connect timeouts).

    The trick: a listening socket with backlog 0 that never accepts. Linux queues one
    completed connection (backlog + 1) and, once the accept queue is full, drops further
    SYNs silently (even with syncookies), so a client's connect hangs until its own
    timeout instead of being refused. One blocking filler connect fills the queue
    deterministically; a few non-blocking extras keep it full should one be reset.
    Use as `with blackhole() as (host, port)`. Checked with aiohttp on Linux: the
    connect raises ConnectionTimeoutError after exactly the configured sock_connect.
    """

    def __init__(self, fillers: int = 3) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.bind((HOST, 0))
        self._server.listen(0)
        self.address: tuple[str, int] = (HOST, self._server.getsockname()[1])
        first = socket.create_connection(self.address, timeout=2.0)
        self._fillers: list[socket.socket] = [first]
        for _ in range(fillers):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(self.address)
            except BlockingIOError:
                pass
            self._fillers.append(s)

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]

    def close(self) -> None:
        for s in self._fillers:
            s.close()
        self._server.close()

    def __enter__(self) -> tuple[str, int]:
        return self.address

    def __exit__(self, *exc: object) -> None:
        self.close()


def blackhole(fillers: int = 4) -> Blackhole:
    return Blackhole(fillers)


# command line ----------------------------------------------------------------------------


async def serve(port: int, host: str = HOST) -> None:
    """Run until cancelled (Ctrl-C)."""
    runner, bound = await start_mock(port, host)
    print(f"mock upstream listening on http://{host}:{bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the Switchboard mock upstream.")
    parser.add_argument("--port", type=int, default=9001)
    parser.add_argument("--host", default=HOST)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.port, args.host))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
