"""The OpenAI Agents SDK's streamed run (`Runner.run_streamed`, its default Responses model) with a
function tool, through the gateway in process, on a Responses upstream, a Claude upstream and a
chat-only OpenAI-compatible upstream: the agent calls the tool, gets its result back to the model
and finishes, and its stream events arrive in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock.upstream import start_mock, state_of

CAPS = ["chat", "streaming", "tools"]


def document(mock: str) -> dict:
    return {
        "resilience": {"max_retries": 0},
        "providers": [
            {"name": "openai", "dialect": "openai", "base_url": f"{mock}/v1"},
            {"name": "claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"},
        ],
        "models": [
            {
                "id": "agent-responses",
                "provider": "openai",
                "upstream_model": "up-resp",
                "capabilities": [*CAPS, "responses"],
            },
            {"id": "agent-claude", "provider": "claude", "upstream_model": "up-claude", "capabilities": CAPS},
            {"id": "agent-chat", "provider": "openai", "upstream_model": "up-chat", "capabilities": CAPS},
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


@pytest.mark.parametrize(
    ("model", "upstream", "path"),
    [
        ("agent-responses", "up-resp", "/v1/responses"),
        ("agent-claude", "up-claude", "/anthropic/v1/messages"),
        ("agent-chat", "up-chat", "/v1/chat/completions"),
    ],
)
async def test_a_streamed_agent_run_calls_its_tool_and_finishes(mock, model, upstream, path):
    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def lookup(query: str) -> str:
        """Look something up."""
        calls.append(query)
        return f"found {query}"

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    client = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, max_retries=0, http_client=http)
    agent = Agent(
        name="helper", instructions="Use the tool.", tools=[lookup], model=OpenAIResponsesModel(model, client)
    )
    result = Runner.run_streamed(agent, input="Find cats.")
    kinds = [event.type async for event in result.stream_events()]
    await http.aclose()

    assert calls == ["mock"]  # the model's call reached the tool, with its arguments
    assert result.final_output  # and the run finished with the model's answer after the tool's result
    assert "run_item_stream_event" in kinds and "raw_response_event" in kinds
    requests = [(p, orjson.loads(body)) for p, _, body, _ in mock.model(upstream).requests]
    assert [p for p, _ in requests] == [path, path]  # two turns, both streamed to the link's own API
    assert all(body.get("stream") is True for _, body in requests)
    assert "found mock" in orjson.dumps(requests[1][1]).decode()  # the tool's result went back up
