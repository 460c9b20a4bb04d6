"""A chat client's structured output, reasoning and usage classes on Gemini, Vertex (Gemini) and Bedrock
links (docs/translation.md#gemini, docs/translation.md#bedrock): `response_format` reaches Gemini as
`responseJsonSchema` and Bedrock as a forced tool, and comes back as the JSON content, never prose;
`reasoning_effort` reaches each as a budget inside the model's range, and the thoughts come back as
`reasoning_content`; cached, cache-write and reasoning tokens reach the usage. Through the gateway in
process with the official openai SDK against the mock's Gemini, Vertex and Bedrock endpoints, which
answer as those APIs do and refuse a budget outside a model's range with a 400."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pydantic
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from routing.upstream.translate.bedrock_structured import STRUCTURED_TOOL
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock import bedrock as mock_bedrock
from tools.mock import clouds
from tools.mock.upstream import start_mock, state_of

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "search", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "What should I search for?"}]
CLAUDE = "anthropic.claude-sonnet-4-20250514-v1:0"
OPUS = "us.anthropic.claude-opus-4-1-20250805-v1:0"  # 32 000 output tokens
# gateway model -> upstream model; gem and vx are Gemini (the API and Vertex), bed is Claude on Bedrock
LINKS = {"gem": "gemini-2.5-flash", "vx": "gemini-2.5-flash-002", "bed": CLAUDE}
CAPS = ["chat", "streaming", "tools", "structured_output"]


def document(mock: str) -> dict:
    def model(mid: str, provider: str, upstream: str, **extra: Any) -> dict:
        return {"id": mid, "provider": provider, "upstream_model": upstream, "capabilities": CAPS, **extra}

    return {
        "resilience": {"max_retries": 0},
        "providers": [
            {
                "name": "g",
                "dialect": "gemini",
                "base_url": f"{mock}/gemini/v1beta",
                "api_key_env": "SWITCHBOARD_UPSTREAM_XLATE_G",
            },
            {
                "name": "v",
                "dialect": "vertex",
                "base_url": f"{mock}/vertex/v1/projects/p1/locations/us-east5",
                "api_key_env": "SWITCHBOARD_UPSTREAM_XLATE_V",
            },
            {
                "name": "b",
                "dialect": "bedrock",
                "base_url": f"{mock}/bedrock?region=us-east-1",
                "api_key_env": "SWITCHBOARD_UPSTREAM_XLATE_B",
            },
        ],
        "models": [
            model("gem", "g", LINKS["gem"]),
            model("vx", "v", LINKS["vx"]),
            model("bed", "b", LINKS["bed"]),
            model("gem-lite", "g", "gemini-2.5-flash-lite", max_output_tokens=4096),
            model("gem-pro", "g", "gemini-2.5-pro"),
            model("gem-old", "g", "gemini-2.0-flash"),
            model("gem-3", "g", "gemini-3-pro-preview"),
            model("bed-opus", "b", OPUS),
            model("bed-llama", "b", "meta.llama3-70b-instruct-v1:0"),
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[Any]:
    runner, port = await start_mock(0)
    url = f"http://127.0.0.1:{port}"
    account, public = clouds.new_service_account(f"{url}/vertex/token", "xlate@p1.iam.gserviceaccount.com")
    async with httpx.AsyncClient(base_url=url) as control:
        email = orjson.loads(account)["client_email"]
        (await control.post("/_control/vertex", json={"client_email": email, "public_key": public})).raise_for_status()
    keys = {
        "SWITCHBOARD_UPSTREAM_XLATE_G": "gem-key",
        "SWITCHBOARD_UPSTREAM_XLATE_V": account,
        "SWITCHBOARD_UPSTREAM_XLATE_B": mock_bedrock.demo_credentials(),
    }
    previous = live.current()
    live.swap(build_snapshot(document(url), key_rows(), keys, version=1))
    yield state_of(runner)
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()


def client() -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, max_retries=0, http_client=http)


def sent(state: Any, upstream: str) -> list[dict]:
    return [orjson.loads(body) for _, _, body, _ in state.model(upstream).requests]


def script(state: Any, upstream: str, step: dict) -> None:
    state.model(upstream).steps.append(step)


def assert_structured_request(model: str, body: dict) -> None:
    """What the upstream received for FORMAT: Gemini's own JSON mode, or Bedrock's forced tool."""
    if model == "bed":
        spec = body["toolConfig"]["tools"][-1]["toolSpec"]
        assert (spec["name"], spec["inputSchema"]) == (STRUCTURED_TOOL, {"json": SCHEMA})
        assert body["toolConfig"]["toolChoice"] == {"tool": {"name": STRUCTURED_TOOL}}
    else:
        config = body["generationConfig"]
        assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == SCHEMA
        assert "responseSchema" not in config  # the OpenAPI-subset field refuses JSON Schema's keywords


def assert_thinking_request(model: str, body: dict, budget: int, max_tokens: int) -> None:
    if model == "bed":
        assert body["additionalModelRequestFields"]["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["inferenceConfig"]["maxTokens"] == max_tokens
    else:
        config = body["generationConfig"]
        assert config["thinkingConfig"] == {"thinkingBudget": budget, "includeThoughts": True}
        assert config["maxOutputTokens"] == max_tokens


THOUGHT = {"gem": clouds.THOUGHT, "vx": clouds.THOUGHT, "bed": "".join(mock_bedrock.THOUGHT)}


# --- structured output -------------------------------------------------------------------


@pytest.mark.parametrize("model", LINKS)
async def test_a_json_schema_reaches_the_upstream_natively_and_comes_back_as_the_content(mock, model):
    async with client() as sdk:
        answer = await sdk.chat.completions.create(model=model, messages=MESSAGES, response_format=FORMAT)
    choice = answer.choices[0]
    assert json.loads(choice.message.content) == {"query": "mock"}  # JSON valid against the schema, not prose
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    (body,) = sent(mock, LINKS[model])
    assert_structured_request(model, body)


@pytest.mark.parametrize("model", LINKS)
async def test_a_streamed_structured_answer_arrives_as_content_deltas(mock, model):
    async with client() as sdk:
        stream = await sdk.chat.completions.create(model=model, messages=MESSAGES, response_format=FORMAT, stream=True)
        chunks = [chunk async for chunk in stream]
    assert json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)) == {"query": "mock"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    (body,) = sent(mock, LINKS[model])
    assert_structured_request(model, body)


async def test_a_schema_keyword_gemini_cannot_honour_is_refused_by_its_path(mock):
    schema = {**SCHEMA, "properties": {"query": {"type": "string", "pattern": "^[a-z]+$"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    async with client() as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.chat.completions.create(model="gem", messages=MESSAGES, response_format=fmt)
    assert refused.value.body["code"] == "unsupported_capability"
    assert refused.value.body["param"] == "response_format.json_schema.schema.properties.query.pattern"
    assert sent(mock, LINKS["gem"]) == []  # nothing went up that could come back as unchecked text


async def test_the_clients_own_tools_stay_callable_beside_a_schema_on_bedrock(mock):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}]
    async with client() as sdk:
        answer = await sdk.chat.completions.create(model="bed", messages=MESSAGES, tools=tools, response_format=FORMAT)
    (body,) = sent(mock, CLAUDE)
    assert [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]] == ["lookup", STRUCTURED_TOOL]
    assert body["toolConfig"]["toolChoice"] == {"any": {}}  # a tool call or the answer in the schema: never prose
    assert answer.choices[0].message.tool_calls[0].function.name == "lookup"


# --- reasoning ---------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "budget"), [("gem", 24576), ("vx", 24576), ("bed", 16384)])
async def test_reasoning_effort_reaches_the_upstream_as_a_budget_and_the_thoughts_come_back(mock, model, budget):
    async with client() as sdk:
        answer = await sdk.chat.completions.create(
            model=model, messages=MESSAGES, reasoning_effort="high", max_tokens=1000
        )
    message = answer.choices[0].message.to_dict()
    assert message["reasoning_content"] == THOUGHT[model] and message["content"]
    (body,) = sent(mock, LINKS[model])
    assert_thinking_request(model, body, budget, 1000 + budget)  # the visible answer keeps its room


@pytest.mark.parametrize("model", LINKS)
async def test_streamed_thoughts_arrive_as_reasoning_content_deltas(mock, model):
    async with client() as sdk:
        stream = await sdk.chat.completions.create(model=model, messages=MESSAGES, reasoning_effort="low", stream=True)
        deltas = [c.choices[0].delta.to_dict() async for c in stream if c.choices]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == THOUGHT[model]
    first_text = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all(not d.get("reasoning_content") for d in deltas[first_text:])  # thoughts come before the answer
    assert "thinking" in str(sent(mock, LINKS[model])[0]).lower()


async def test_budgets_are_clamped_inside_each_models_range(mock):
    """The mock refuses a budget outside the model's range as the providers do: every call is a 200."""
    async with client() as sdk:
        await sdk.chat.completions.create(model="gem-lite", messages=MESSAGES, reasoning_effort="high")
        await sdk.chat.completions.create(model="gem-pro", messages=MESSAGES, reasoning_effort="minimal")
        await sdk.chat.completions.create(model="gem-3", messages=MESSAGES, reasoning_effort="medium")
        await sdk.chat.completions.create(model="gem", messages=MESSAGES, reasoning_effort="none")
        await sdk.chat.completions.create(
            model="bed-opus", messages=MESSAGES, reasoning_effort="high", max_tokens=30000
        )
    (lite,) = sent(mock, "gemini-2.5-flash-lite")
    assert lite["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 4096 - 1024  # the declared output limit
    (pro,) = sent(mock, "gemini-2.5-pro")
    assert pro["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 512  # 128..32768
    (three,) = sent(mock, "gemini-3-pro-preview")
    assert three["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "high", "includeThoughts": True}
    (off,) = sent(mock, LINKS["gem"])
    assert off["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 0}
    (opus,) = sent(mock, OPUS)
    assert opus["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 16384
    assert opus["inferenceConfig"]["maxTokens"] == 32000  # budget + 30000 capped at the model's limit


@pytest.mark.parametrize(
    ("model", "extra", "param"),
    [
        ("gem-old", {}, "reasoning_effort"),  # no thinking range known: not sent to a 400
        ("gem-pro", {"reasoning_effort": "none"}, "reasoning_effort"),  # 2.5 Pro cannot stop thinking
        ("bed-llama", {}, "reasoning_effort"),
        ("bed", {"temperature": 0.2}, "temperature"),
        ("bed", {"response_format": FORMAT}, "response_format"),
    ],
)
async def test_reasoning_the_upstream_cannot_take_is_refused_by_name(mock, model, extra, param):
    body = {"reasoning_effort": "low", **extra}
    async with client() as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.chat.completions.create(model=model, messages=MESSAGES, **body)
    assert refused.value.body["param"] == param
    assert all(ms.count == 0 for ms in mock.models.values())


# --- usage classes -----------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gem", "vx"])
async def test_gemini_cached_and_thought_tokens_reach_the_usage(mock, model):
    script(mock, LINKS[model], {"cached_tokens": 4})
    script(mock, LINKS[model], {"cached_tokens": 4})
    async with client() as sdk:
        answer = await sdk.chat.completions.create(model=model, messages=MESSAGES, reasoning_effort="low")
        stream = await sdk.chat.completions.create(
            model=model, messages=MESSAGES, reasoning_effort="low", stream=True, stream_options={"include_usage": True}
        )
        streamed = [c.usage async for c in stream if c.usage is not None][-1]
    for usage in (answer.usage, streamed):
        assert usage.prompt_tokens_details.cached_tokens == 4
        assert usage.completion_tokens_details.reasoning_tokens == clouds.THOUGHT_TOKENS
        assert usage.completion_tokens == clouds.GEMINI_USAGE["candidatesTokenCount"] + clouds.THOUGHT_TOKENS


async def test_bedrock_cache_reads_and_writes_reach_the_usage(mock):
    script(mock, CLAUDE, {"cache_read": 6, "cache_write": 3})
    script(mock, CLAUDE, {"cache_read": 6, "cache_write": 3})
    async with client() as sdk:
        answer = await sdk.chat.completions.create(model="bed", messages=MESSAGES)
        stream = await sdk.chat.completions.create(
            model="bed", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        streamed = [c.usage async for c in stream if c.usage is not None][-1]
    for usage in (answer.usage, streamed):
        assert usage.prompt_tokens == mock_bedrock.USAGE[0] + 6 + 3
        assert usage.prompt_tokens_details.cached_tokens == 6
        assert usage.to_dict()["cache_creation_input_tokens"] == 3


@pytest.mark.parametrize(
    ("dialect", "upstream", "answer", "classes"),
    [
        (
            "gemini",
            "gemini-2.5-flash",
            {
                "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                "usageMetadata": {
                    "promptTokenCount": 20,
                    "candidatesTokenCount": 3,
                    "thoughtsTokenCount": 7,
                    "cachedContentTokenCount": 8,
                },
            },
            {"cache_read": 8, "reasoning": 7},
        ),
        (
            "bedrock",
            CLAUDE,
            {
                "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 5, "outputTokens": 2, "cacheReadInputTokens": 8, "cacheWriteInputTokens": 4},
            },
            {"cache_read": 8, "cache_write": 4},
        ),
        (
            "vertex",
            "claude-sonnet-4@20250514",
            {
                "content": [{"type": "text", "text": "hi"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 8},
            },
            {"cache_read": 8},
        ),
    ],
)
def test_the_usage_record_prices_the_classes_of_a_whole_answer(dialect, upstream, answer, classes):
    from routing.upstream.dialects import get_dialect
    from tests.upstream.conftest import model, provider

    spec = model(upstream, provider(dialect=dialect, base_url="http://127.0.0.1:9/x?region=us-east-1"))
    parsed = get_dialect(dialect).parse_response("chat", orjson.dumps(answer), spec)
    assert parsed.classes == classes


# --- real structured-output libraries ----------------------------------------------------

RUNS = 3  # answers per library and link here; the 100-answer count is in docs/translation.md#gemini


class Search(pydantic.BaseModel):
    query: str


async def agents_sdk(sdk: openai.AsyncOpenAI, model: str) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    agent = Agent(name="s", model=OpenAIChatCompletionsModel(model=model, openai_client=sdk), output_type=Search)
    return (await Runner.run(agent, "What should I search for?")).final_output


async def pydantic_ai_native(sdk: openai.AsyncOpenAI, model: str) -> Any:
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    agent = Agent(OpenAIChatModel(model, provider=OpenAIProvider(openai_client=sdk)), output_type=NativeOutput(Search))
    return (await agent.run("What should I search for?")).output


async def instructor_json_schema(sdk: openai.AsyncOpenAI, model: str) -> Any:
    import instructor

    patched = instructor.from_openai(sdk, mode=instructor.Mode.JSON_SCHEMA)
    return await patched.chat.completions.create(model=model, messages=MESSAGES, response_model=Search, max_retries=0)


async def langchain_default(sdk: openai.AsyncOpenAI, model: str) -> Any:
    from langchain_openai import ChatOpenAI

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    llm = ChatOpenAI(model=model, base_url="http://gateway/v1", api_key=API_KEY, http_async_client=http, max_retries=0)
    try:
        return await llm.with_structured_output(Search).ainvoke("What should I search for?")
    finally:
        await http.aclose()


@pytest.mark.parametrize("library", [agents_sdk, pydantic_ai_native, instructor_json_schema, langchain_default])
@pytest.mark.parametrize("model", LINKS)
async def test_structured_output_libraries_get_answers_valid_against_their_schema(mock, model, library):
    async with client() as sdk:
        for _ in range(RUNS):
            answer = await library(sdk, model)  # instructor answers with a subclass of its own
            assert Search.model_validate(answer.model_dump()).model_dump() == {"query": "mock"}
    bodies = sent(mock, LINKS[model])
    assert len(bodies) == RUNS  # one call each: no retry after prose
    for body in bodies:  # the schema went up by the upstream's own mechanism
        if model == "bed":
            assert body["toolConfig"]["toolChoice"] == {"tool": {"name": STRUCTURED_TOOL}}
        else:
            assert "responseJsonSchema" in body["generationConfig"]


def test_the_mocks_refuse_what_the_providers_refuse():
    """So a 200 above means the budget was inside the model's range, as the provider checks it."""
    assert "between 128 and 32768" in clouds._config_problem(
        "gemini-2.5-pro", {"thinkingConfig": {"thinkingBudget": 40000}}
    )  # noqa: SLF001
    assert clouds._config_problem("gemini-2.5-pro", {"thinkingConfig": {"thinkingBudget": 0}})  # noqa: SLF001
    assert clouds._config_problem("gemini-2.5-flash", {"thinkingConfig": {"thinkingBudget": 24576}}) is None  # noqa: SLF001
    schema = {"responseMimeType": "application/json", "responseSchema": SCHEMA}
    assert "additionalProperties" in clouds._config_problem("gemini-2.5-flash", schema)  # noqa: SLF001
    thinking = {"additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}}}
    assert mock_bedrock.request_problem(CLAUDE, {**thinking, "inferenceConfig": {"maxTokens": 2048}})
    assert mock_bedrock.request_problem(OPUS, {"inferenceConfig": {"maxTokens": 40000}})
    forced = {"toolConfig": {"tools": [{"toolSpec": {"name": "f"}}], "toolChoice": {"tool": {"name": "f"}}}}
    assert "forces tool use" in mock_bedrock.request_problem(CLAUDE, {**thinking, **forced})
    assert mock_bedrock.request_problem(CLAUDE, {**thinking, "inferenceConfig": {"maxTokens": 4096}}) is None


async def test_gemini_3_thought_signatures_go_back_with_their_function_calls(mock):
    """Gemini 3 signs its function calls and refuses the next turn without the signature: the chat answer
    carries it in the tool call's `extra_content.google.thought_signature` (Google's own OpenAI-compatible
    field), and the call sent back up carries it again."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}]
    async with client() as sdk:
        first = await sdk.chat.completions.create(model="gem-3", messages=MESSAGES, tools=tools)
        call = first.choices[0].message.to_dict()["tool_calls"][0]
        assert call["extra_content"] == {"google": {"thought_signature": clouds.THOUGHT_SIGNATURE}}
        turn = [
            *MESSAGES,
            first.choices[0].message.to_dict(),
            {"role": "tool", "tool_call_id": call["id"], "content": "ok"},
        ]
        second = await sdk.chat.completions.create(model="gem-3", messages=turn, tools=tools)
    assert second.choices[0].message.content
    (_, again) = sent(mock, "gemini-3-pro-preview")
    signed = [p for c in again["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p.get("thoughtSignature") for p in signed] == [clouds.THOUGHT_SIGNATURE]
