"""What the coding agents send, through the gateway in process, with the official SDKs (docs/clients.md#codex,
docs/clients.md#claude-code).

Claude Code's Messages bodies (a `system` turn inside `messages`, thinking with its signature, tools,
cache_control, metadata, context_management, output_config, `?beta=true` and `anthropic-beta`) on a
passthrough link and on a translated one; Codex's streamed `/v1/responses` and its stateless second
turn; and the answer's `model` being the id the client asked for everywhere.
"""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2  # what the anthropic SDK is built on
import openai
import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway import responses_grammar as grammar
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock.upstream import start_mock, state_of

CAPS = ["chat", "streaming", "tools"]


def document(mock: str) -> dict:
    return {
        "resilience": {"max_retries": 1, "backoff_base_ms": 1, "backoff_max_ms": 2},
        "providers": [
            {"name": "mock", "dialect": "openai", "base_url": f"{mock}/v1"},
            {"name": "mock-claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"},
        ],
        "models": [
            {"id": "cc-claude", "provider": "mock-claude", "upstream_model": "up-claude", "capabilities": CAPS},
            {
                "id": "cc-openai",
                "provider": "mock",
                "upstream_model": "up-openai",
                "capabilities": [*CAPS, "reasoning"],
            },
            {
                "id": "codex",
                "provider": "mock",
                "upstream_model": "up-codex",
                "capabilities": ["responses", "streaming", "tools"],
            },
            {
                "id": "codex-claude",
                "provider": "mock-claude",
                "upstream_model": "up-codex-claude",
                "capabilities": ["chat", "responses", "streaming", "tools"],
            },
        ],
        "aliases": {"claude-opus-4-8": "cc-claude"},
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[tuple[str, Any]]:
    runner, port = await start_mock(0)
    yield f"http://127.0.0.1:{port}", state_of(runner)
    await runner.cleanup()


@pytest.fixture
async def rows(mock, monkeypatch) -> AsyncIterator[list[dict]]:
    """The usage records the requests left (the request log's lines are made from them)."""
    out: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: out.append(row))
    previous = live.current()
    live.swap(build_snapshot(document(mock[0]), key_rows(), {}, version=1))
    yield out
    live.swap(previous)
    await current().transport.aclose()


class Sent:
    """The request bytes an SDK put on the wire (an httpx request hook)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, request: httpx2.Request) -> None:
        self.bodies.append(await request.aread())


def http() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway_application), headers={"Authorization": f"Bearer {API_KEY}"}
    )


def claude(sent: Sent | None = None) -> anthropic.AsyncAnthropic:
    hooks = {"request": [sent]} if sent is not None else {}
    client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gateway_application), event_hooks=hooks)
    return anthropic.AsyncAnthropic(base_url="http://gateway", api_key=API_KEY, max_retries=0, http_client=client)


def raw_of(state: Any, model: str) -> list[bytes]:
    """The request bodies the mock upstream received for `model`, as bytes."""
    return [body for _, _, body, _ in state.model(model).requests]


def renamed(raw: bytes, old: str, new: str) -> bytes:
    return re.sub(rb'("model"\s*:\s*)"' + re.escape(old.encode()) + rb'"', rb'\1"' + new.encode() + rb'"', raw)


# A first Claude Code request, as its default session sends it.
BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    "cache_control": {"type": "ephemeral"},
}
AGENT = {  # Claude Code's Agent tool has a `model` parameter: a second "model" member in the body
    "name": "Agent",
    "description": "Launch a sub-agent",
    "input_schema": {"type": "object", "properties": {"model": {"type": "string", "enum": ["sonnet", "opus"]}}},
}
TURN_1: dict[str, Any] = {
    "max_tokens": 8192,
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "system", "content": "Available agent types: general-purpose, Explore."},
    ],
    "tools": [BASH, AGENT],
    "metadata": {"user_id": "user_abc_account_1_session_2"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
}
BETAS = ["interleaved-thinking-2025-05-14", "context-management-2025-06-27"]
THOUGHT = {"type": "thinking", "thinking": "I should run ls.", "signature": "EqQBCkYIBxgCKkD+sig/=="}
ANSWER_1 = {
    "id": "msg_turn1",
    "type": "message",
    "role": "assistant",
    "model": "up-claude",
    "content": [THOUGHT, {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 50, "cache_creation_input_tokens": 40, "output_tokens": 9},
}


async def test_claude_codes_body_goes_up_as_sent_and_its_thinking_survives_turn_two(mock, rows):
    url, state = mock
    state.model("up-claude").steps.append({"body": orjson.dumps(ANSWER_1).decode()})
    sent = Sent()
    async with claude(sent) as client:
        first = await client.beta.messages.with_raw_response.create(model="cc-claude", betas=BETAS, **TURN_1)
        message = await first.parse()
        # the model asked for, not the upstream's name: Claude Code keeps its thinking blocks only then
        assert message.model == "cc-claude"
        assert first.headers["x-switchboard-upstream-model"] == "up-claude"
        assert [b.type for b in message.content] == ["thinking", "tool_use"]
        history = [
            *TURN_1["messages"],
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]},
        ]
        second = await client.beta.messages.create(
            model="cc-claude", betas=BETAS, stream=True, **{**TURN_1, "messages": history}
        )
        events = [event async for event in second]
    assert [e.type for e in events][0] == "message_start" and events[0].message.model == "cc-claude"
    assert events[-1].type == "message_stop"
    received = raw_of(state, "up-claude")
    assert len(received) == 2
    # byte for byte what the SDK sent, only the model replaced; the beta header forwarded
    for client_bytes, upstream_bytes in zip(sent.bodies, received, strict=True):
        assert upstream_bytes == renamed(client_bytes, "cc-claude", "up-claude")
    turn_2 = orjson.loads(received[1])
    assert turn_2["messages"][2]["content"][0] == THOUGHT  # thinking block and its signature, untouched
    assert turn_2["messages"][1] == {"role": "system", "content": "Available agent types: general-purpose, Explore."}
    headers = state.model("up-claude").requests[1][1]
    assert headers["anthropic-beta"] == ",".join(BETAS)
    assert [r["requested_model"] for r in rows] == ["cc-claude", "cc-claude"]
    assert [r["status"] for r in rows] == [200, 200]


async def test_an_alias_publishes_claude_codes_own_model_name(mock, rows):
    async with claude() as client:
        message = await client.messages.create(
            model="claude-opus-4-8", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.model == "claude-opus-4-8"
    assert orjson.loads(raw_of(mock[1], "up-claude")[-1])["model"] == "up-claude"


async def test_on_a_translated_link_system_turns_are_system_messages_and_hints_are_listed(mock, rows):
    async with claude() as client:
        raw = await client.beta.messages.with_raw_response.create(model="cc-openai", betas=BETAS, **TURN_1)
        message = await raw.parse()
    assert message.model == "cc-openai"
    assert raw.headers["x-switchboard-upstream-model"] == "up-openai"
    # thinking is mapped (its 1 024-token budget is reasoning_effort "low"), no longer dropped
    assert raw.headers["x-switchboard-dropped"] == "cache_control, output_config.effort, context_management"
    chat = orjson.loads(raw_of(mock[1], "up-openai")[-1])
    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "List the files."},
        {"role": "system", "content": "Available agent types: general-purpose, Explore."},
    ]
    assert chat["user"] == "user_abc_account_1_session_2" and chat["reasoning_effort"] == "low"
    assert not {"thinking", "context_management", "output_config", "metadata"} & chat.keys()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]}, "mcp_servers"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].input_schema"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}
                ]
            },
            "messages[0].content[0].type",
        ),
    ],
)
async def test_a_field_without_counterpart_is_refused_by_name_on_a_translated_link_only(mock, rows, extra, field):
    body = {**copy.deepcopy(TURN_1), **extra}
    async with claude() as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.beta.messages.create(model="cc-openai", **body)
        assert field in info.value.message and "no counterpart" in info.value.message
        await client.beta.messages.create(model="cc-claude", **body)  # a passthrough link takes it as it is
    assert rows[0]["error_code"] == "unsupported_capability"
    assert orjson.loads(raw_of(mock[1], "up-claude")[-1])[field.split("[")[0]] == body[field.split("[")[0]]


async def test_a_refused_body_is_logged_with_its_model(mock, rows):
    async with http() as client:
        bad = {"model": "cc-claude", "max_tokens": "many", "messages": []}
        answer = await client.post("http://gateway/v1/messages", json=bad)
        assert answer.status_code == 400
        bad = {"model": "codex", "input": [{"role": "wizard", "content": "x"}]}
        answer = await client.post("http://gateway/v1/responses", json=bad)
        assert answer.status_code == 400
    assert [(r["endpoint"], r["requested_model"], r["status"]) for r in rows] == [
        ("messages", "cc-claude", 400),
        ("responses", "codex", 400),
    ]


# --- Codex: streamed /v1/responses -------------------------------------------------------------

FUNCTION = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}, "strict": False}


def codex() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, max_retries=0, http_client=http())


async def test_a_streamed_responses_call_relays_the_upstreams_events(mock, rows):
    url, state = mock
    async with codex() as client:
        stream = await client.responses.create(model="codex", input="list files", tools=[FUNCTION], stream=True)
        events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert "response.output_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    completed = events[-1].response
    assert completed.model == "codex" and events[0].response.model == "codex"
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    assert done == [item.id for item in completed.output]  # every done item is in the completed response
    sent = orjson.loads(raw_of(state, "up-codex")[-1])
    assert sent["stream"] is True and sent["model"] == "up-codex" and "stream_options" not in sent
    assert (rows[-1]["prompt_tokens"], rows[-1]["completion_tokens"], rows[-1]["streamed"]) == (12, 7, True)
    assert not rows[-1]["tokens_estimated"]


async def test_the_stream_is_byte_identical_to_the_upstreams_the_model_aside(mock, rows):
    url, state = mock
    body = {"model": "codex", "input": "hi", "stream": True}
    async with http() as client:
        direct = await httpx.AsyncClient().post(f"{url}/v1/responses", json={**body, "model": "up-codex"})
        through = await client.post("http://gateway/v1/responses", json=body)
    assert through.status_code == 200 and through.headers["content-type"].startswith("text/event-stream")
    assert through.content == renamed(direct.content, "up-codex", "codex")
    assert through.headers["x-switchboard-upstream-model"] == "up-codex"


async def test_a_stream_that_breaks_before_content_is_retried_and_one_cut_after_is_billed(mock, rows):
    url, state = mock
    # broken after response.created (held, nothing sent): retried; then one cut after two deltas
    state.model("up-codex").steps.extend([{"break_after": 1}, {"frames": 3}, {"frames": 3, "break_after": 5}])
    async with codex() as client:
        stream = await client.responses.create(model="codex", input="hi", stream=True)
        kinds = [event.type async for event in stream]
        assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
        assert state.model("up-codex").count == 2
        stream = await client.responses.create(model="codex", input="hi", stream=True)
        cut = [event async for event in stream]
    # the relayed events, then Responses' own error event in sequence (no response.completed)
    assert [e.type for e in cut][-2:] == ["response.output_text.delta", "error"]
    assert cut[-1].sequence_number == cut[-2].sequence_number + 1
    assert rows[-1]["error_code"] == "upstream_stream_error"
    assert rows[-1]["tokens_estimated"] and rows[-1]["completion_tokens"] >= 1


async def test_codexs_second_turn_echoes_items_with_nulls_and_is_accepted(mock, rows):
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": None,
        "encrypted_content": None,
        "status": None,
    }
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell", "arguments": "{}"}
    turn_2 = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        reasoning,
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt", "id": None, "status": None},
        {"type": "future_item", "payload": {"x": 1}},
    ]
    async with codex() as client:
        stream = await client.responses.create(model="codex", input=turn_2, store=False, stream=True)
        kinds = [event.type async for event in stream]
    assert kinds[-1] == "response.completed"
    assert orjson.loads(raw_of(mock[1], "up-codex")[-1])["input"] == turn_2  # passed through as sent


async def test_every_endpoint_answers_with_the_model_asked_for(mock, rows):
    async with codex() as client:
        chat = await client.chat.completions.with_raw_response.create(
            model="cc-openai", messages=[{"role": "user", "content": "hi"}]
        )
        assert chat.parse().model == "cc-openai"
        assert chat.headers["x-switchboard-upstream-model"] == "up-openai"
        chunks = await client.chat.completions.create(
            model="cc-openai", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert {chunk.model async for chunk in chunks} == {"cc-openai"}
        response = await client.responses.create(model="codex", input="hi")
        assert response.model == "codex"
    async with claude() as client:
        async with client.messages.stream(
            model="cc-openai", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            final = await stream.get_final_message()
        assert final.model == "cc-openai"


# --- Responses on a link that does not speak it: translated through the chat shape ------------


def check_grammar(events: list[Any]) -> None:
    """The Responses event grammar (tests.gateway.responses_grammar) of the events the SDK parsed."""
    assert any(e.type.endswith(".delta") for e in events)
    grammar.check_grammar([e.model_dump(mode="json") for e in events])


async def test_a_streamed_responses_call_on_an_anthropic_link_is_translated_with_its_tool_call(mock, rows):
    async with codex() as client:
        stream = await client.responses.create(model="codex-claude", input="list files", tools=[FUNCTION], stream=True)
        events = [event async for event in stream]
    check_grammar(events)
    output = events[-1].response.output
    assert [item.type for item in output] == ["message", "function_call"]
    assert output[0].content[0].text == "tok0 tok1 tok2 "
    assert (output[1].name, output[1].arguments) == ("shell", '{"query": "mock"}')
    assert events[-1].response.model == "codex-claude" and events[-1].response.usage.input_tokens == 12
    sent = orjson.loads(raw_of(mock[1], "up-codex-claude")[-1])
    assert sent["tools"][0]["name"] == "shell" and sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list files"}]}
    ]
    assert (rows[-1]["prompt_tokens"], rows[-1]["completion_tokens"]) == (12, 7)


async def test_codexs_second_turn_on_an_anthropic_link_sends_the_call_and_its_output(mock, rows):
    turn_2 = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": None},
        {"type": "function_call", "id": "fc_1", "call_id": "toolu_1", "name": "shell", "arguments": '{"c": "ls"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "a.txt"},
    ]
    async with codex() as client:
        stream = await client.responses.create(
            model="codex-claude", input=turn_2, tools=[FUNCTION], store=False, stream=True
        )
        events = [event async for event in stream]
        answer = await client.responses.create(model="codex-claude", input="hi")
    check_grammar(events)
    assert [item.type for item in events[-1].response.output] == ["message"]
    sent = orjson.loads(raw_of(mock[1], "up-codex-claude")[0])
    assert sent["system"] == "be careful"
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"c": "ls"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]},
    ]
    assert answer.model == "codex-claude" and answer.output_text == "Hello from the mock upstream."


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ],
)
async def test_what_a_translated_responses_link_cannot_honour_is_refused_by_name(mock, rows, extra, param):
    async with codex() as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model="codex-claude", input="hi", **extra)
    assert info.value.body["param"] == param
    assert mock[1].model("up-codex-claude").count == 0


async def test_hosted_tools_a_chat_upstream_cannot_host_are_dropped_and_named(mock, rows):
    """Codex offers web_search and namespace groups on every turn: a translated link leaves them out (the
    model never had to call them) and says so, instead of refusing every Codex request."""
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
        {"type": "web_search"},
        {"type": "namespace", "name": "multi_agent_v1", "tools": []},
    ]
    async with codex() as client:
        raw = await client.responses.with_raw_response.create(model="codex-claude", input="hi", tools=tools)
    assert raw.headers["x-switchboard-dropped"] == "tools[1] (web_search), tools[2] (namespace)"
    (sent,) = [orjson.loads(body) for body in raw_of(mock[1], "up-codex-claude")]
    assert [t["name"] for t in sent["tools"]] == ["exec_command"]
