"""The OpenAI Agents SDK's streamed run (`Runner.run_streamed`, its default Responses model) with a
function tool, through the gateway in process, on every chat-capable dialect's mock: OpenAI and Azure
(Responses relayed), Anthropic, Gemini, Vertex (Gemini and Claude), Bedrock, Ollama, a chat-only
Azure deployment and a chat-only OpenAI-compatible server (translated): the agent calls the tool,
its result goes back up, the run finishes, and each turn's events keep the Responses grammar."""

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
from tests.gateway.responses_grammar import check_grammar
from tests.inprocess import gateway_application
from tools.mock.bedrock import demo_credentials
from tools.mock.clouds import new_service_account
from tools.mock.upstream import start_mock, state_of

CAPS = ["chat", "streaming", "tools"]


def document(mock: str) -> dict:
    return {
        "resilience": {"max_retries": 0},
        "providers": [
            {"name": "openai", "dialect": "openai", "base_url": f"{mock}/v1"},
            {"name": "claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"},
            {
                "name": "az",
                "dialect": "azure_openai",
                "base_url": f"{mock}/azure/openai?api-version=2024-10-21",
                "api_key_env": "SWITCHBOARD_UPSTREAM_AGENTS",
            },
            {
                "name": "gem",
                "dialect": "gemini",
                "base_url": f"{mock}/gemini/v1beta",
                "api_key_env": "SWITCHBOARD_UPSTREAM_AGENTS",
            },
            {
                "name": "bed",
                "dialect": "bedrock",
                "base_url": f"{mock}/bedrock?region=us-east-1",
                "api_key_env": "SWITCHBOARD_UPSTREAM_AGENTS_AWS",
            },
            {"name": "oll", "dialect": "ollama", "base_url": f"{mock}/v1"},
            {
                "name": "vx",
                "dialect": "vertex",
                "base_url": f"{mock}/vertex/v1/projects/proj-1/locations/us-east5",
                "api_key_env": "SWITCHBOARD_UPSTREAM_AGENTS_VX",
            },
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
            {"id": "agent-azure", "provider": "az", "upstream_model": "up-az", "capabilities": [*CAPS, "responses"]},
            {"id": "agent-azure-chat", "provider": "az", "upstream_model": "up-az-chat", "capabilities": CAPS},
            # the gateway's id is the upstream's name: nothing renamed, the relayed bytes are the upstream's
            {
                "id": "resp-same",
                "provider": "openai",
                "upstream_model": "resp-same",
                "capabilities": [*CAPS, "responses"],
            },
            {"id": "agent-gemini", "provider": "gem", "upstream_model": "up-gem", "capabilities": CAPS},
            {"id": "agent-bedrock", "provider": "bed", "upstream_model": "up-bed", "capabilities": CAPS},
            {"id": "agent-ollama", "provider": "oll", "upstream_model": "up-oll", "capabilities": CAPS},
            {"id": "agent-vertex-gemini", "provider": "vx", "upstream_model": "gemini-agents", "capabilities": CAPS},
            {"id": "agent-vertex-claude", "provider": "vx", "upstream_model": "claude-agents", "capabilities": CAPS},
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[Any]:
    runner, port = await start_mock(0)
    url = f"http://127.0.0.1:{port}"
    account, public = new_service_account(f"{url}/vertex/token", "agents@proj-1.iam.gserviceaccount.com")
    async with httpx.AsyncClient(base_url=url) as control:
        email = orjson.loads(account)["client_email"]
        (await control.post("/_control/vertex", json={"client_email": email, "public_key": public})).raise_for_status()
    previous = live.current()
    keys = {
        "SWITCHBOARD_UPSTREAM_AGENTS": "agents-key",
        "SWITCHBOARD_UPSTREAM_AGENTS_AWS": demo_credentials(),
        "SWITCHBOARD_UPSTREAM_AGENTS_VX": account,
    }
    live.swap(build_snapshot(document(f"http://127.0.0.1:{port}"), key_rows(), keys, version=1))
    state = state_of(runner)
    state.url = url  # for a test that calls the mock directly too
    yield state
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()


@pytest.mark.parametrize(
    ("model", "upstream", "path"),
    [
        ("agent-responses", "up-resp", "/v1/responses"),
        ("agent-claude", "up-claude", "/anthropic/v1/messages"),
        ("agent-chat", "up-chat", "/v1/chat/completions"),
        ("agent-azure", "up-az", "/azure/openai/responses"),
        ("agent-azure-chat", "up-az-chat", "/azure/openai/deployments/up-az-chat/chat/completions"),
        ("agent-gemini", "up-gem", "/gemini/v1beta/models/up-gem:streamGenerateContent"),
        ("agent-bedrock", "up-bed", "/bedrock/model/up-bed/converse-stream"),
        ("agent-ollama", "up-oll", "/v1/chat/completions"),
        (
            "agent-vertex-gemini",
            "gemini-agents",
            "/vertex/v1/projects/proj-1/locations/us-east5/publishers/google/models/gemini-agents:streamGenerateContent",
        ),
        (
            "agent-vertex-claude",
            "claude-agents",
            "/vertex/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-agents:streamRawPredict",
        ),
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
    events = [event async for event in result.stream_events()]
    await http.aclose()
    kinds = {event.type for event in events}

    assert calls == ["mock"]  # the model's call reached the tool, with its arguments
    assert result.final_output  # and the run finished with the model's answer after the tool's result
    assert "run_item_stream_event" in kinds and "raw_response_event" in kinds
    raw = [e.data.model_dump(mode="json") for e in events if e.type == "raw_response_event"]
    starts = [i for i, event in enumerate(raw) if event["type"] == "response.created"]
    assert len(starts) == 2  # each turn's events keep the Responses grammar, as the SDK parsed them
    for begin, end in zip(starts, [*starts[1:], len(raw)], strict=True):
        check_grammar(raw[begin:end], contiguous=not path.endswith("/responses"))
    requests = [(p, orjson.loads(body)) for p, _, body, _ in mock.model(upstream).requests]
    assert [p for p, _ in requests] == [path, path]  # two turns, both streamed to the link's own API
    assert (
        all(body.get("stream") is True for _, body in requests) or "stream" in path.lower()
    )  # Gemini, Bedrock: in the path
    assert "found mock" in orjson.dumps(requests[1][1]).decode()  # the tool's result went back up
