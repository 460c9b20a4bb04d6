"""A chat client's structured output and reasoning on a Claude link (docs/translation.md#anthropic):
`response_format` reaches Claude as a forced tool and comes back as the JSON content, never prose;
`reasoning_effort` reaches Claude as a thinking budget inside the model's range, and Claude's
thinking comes back as `reasoning_content`, streamed or not. Through the gateway in process with
the official openai SDK against the mock's Anthropic endpoint, and on recorded Anthropic frames."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from routing.upstream.translate.anthropic_structured import STRUCTURED_TOOL
from routing.upstream.translate.chat_to_anthropic import anthropic_request, chat_completion_of, translate_sse
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock.upstream import start_mock, state_of

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "search", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "What should I search for?"}]


def document(mock: str) -> dict:
    caps = ["chat", "streaming", "tools", "structured_output"]
    return {
        "resilience": {"max_retries": 0},
        "providers": [{"name": "claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"}],
        "models": [
            {"id": "claude", "provider": "claude", "upstream_model": "up-claude", "capabilities": caps},
            {
                "id": "claude-small",
                "provider": "claude",
                "upstream_model": "up-small",
                "capabilities": caps,
                "max_output_tokens": 4096,
            },
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[Any]:
    runner, port = await start_mock(0)
    previous = live.current()
    live.swap(build_snapshot(document(f"http://127.0.0.1:{port}"), key_rows(), {}, version=1))
    yield state_of(runner)
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()


def client() -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, max_retries=0, http_client=http)


def sent(state: Any, model: str) -> list[dict]:
    return [orjson.loads(body) for _, _, body, _ in state.model(model).requests]


async def test_a_json_schema_reaches_claude_as_a_forced_tool_and_comes_back_as_the_content(mock):
    async with client() as sdk:
        answer = await sdk.chat.completions.create(model="claude", messages=MESSAGES, response_format=FORMAT)
    choice = answer.choices[0]
    assert json.loads(choice.message.content) == {"query": "mock"}  # the tool's input: JSON, not prose
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    (body,) = sent(mock, "up-claude")
    assert body["tools"] == [
        {"name": STRUCTURED_TOOL, "description": body["tools"][0]["description"], "input_schema": SCHEMA}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": STRUCTURED_TOOL}


async def test_a_streamed_structured_answer_arrives_as_content_deltas(mock):
    async with client() as sdk:
        stream = await sdk.chat.completions.create(
            model="claude", messages=MESSAGES, response_format=FORMAT, stream=True
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"query": "mock"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)


async def test_reasoning_effort_reaches_claude_as_a_budget_inside_the_models_range(mock):
    async with client() as sdk:
        await sdk.chat.completions.create(model="claude", messages=MESSAGES, reasoning_effort="high", max_tokens=1000)
        await sdk.chat.completions.create(model="claude-small", messages=MESSAGES, reasoning_effort="high")
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.chat.completions.create(
                model="claude", messages=MESSAGES, reasoning_effort="low", temperature=0.2
            )
    (big,) = sent(mock, "up-claude")
    assert big["thinking"] == {"type": "enabled", "budget_tokens": 16384} and big["max_tokens"] == 1000 + 16384
    (small,) = sent(mock, "up-small")
    assert small["thinking"]["budget_tokens"] == 4096 - 1024  # clamped to the model's declared output
    assert refused.value.body["param"] == "temperature"  # refused by name, not sent to a 400 upstream


def test_claudes_thinking_and_structured_answer_map_back_to_the_chat_shape():
    message = {
        "id": "msg_1",
        "model": "up-claude",
        "content": [
            {"type": "thinking", "thinking": "Think first.", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": STRUCTURED_TOOL, "input": {"query": "cats"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    out, prompt, completion = chat_completion_of(message, "up-claude")
    assert out["choices"][0]["message"] == {
        "role": "assistant",
        "content": '{"query":"cats"}',
        "reasoning_content": "Think first.",
    }
    assert out["choices"][0]["finish_reason"] == "stop" and (prompt, completion) == (10, 5)


async def test_claudes_streamed_thinking_becomes_reasoning_content_deltas():
    events = [
        (
            "message_start",
            {"type": "message_start", "message": {"id": "m", "model": "up", "usage": {"input_tokens": 9}}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    raw = b"".join(b"event: " + n.encode() + b"\ndata: " + orjson.dumps(d) + b"\n\n" for n, d in events)

    async def chunks() -> AsyncIterator[bytes]:
        yield raw

    class Model:
        upstream_model = "up"

    frames = [f async for f in translate_sse(chunks(), Model())]  # type: ignore[arg-type]
    deltas = [orjson.loads(f[6:])["choices"][0]["delta"] for f in frames if f.startswith(b"data: {")]
    assert [d.get("reasoning_content") for d in deltas if d.get("reasoning_content")] == ["Hm."]
    assert "".join(d.get("content") or "" for d in deltas) == "Hi"


def test_the_clients_own_tools_stay_callable_beside_a_schema():
    tools = [{"type": "function", "function": {"name": "search", "parameters": SCHEMA}}]
    out = anthropic_request({"messages": MESSAGES, "tools": tools, "response_format": FORMAT}, "up", False)
    assert [t["name"] for t in out["tools"]] == ["search", STRUCTURED_TOOL]
    assert out["tool_choice"] == {"type": "any"}  # a tool call or the answer in the schema: never prose
