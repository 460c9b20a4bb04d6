"""Structured output of the real client libraries, each in its default structured mode, through the
gateway in process onto a translated link: the OpenAI Agents SDK (`output_type`, over Responses),
pydantic-ai (`NativeOutput`), instructor (`Mode.JSON_SCHEMA`) and LangChain
(`ChatOpenAI.with_structured_output`, its default `json_schema` method) ask a model behind an
Anthropic, Gemini, Vertex (Gemini and Claude) or Bedrock link for a `Plan` 100 times, and every
answer is the JSON the library asked for: it validates against the schema the library sent, and
the library hands back a `Plan` on its first try (docs/clients-sdks.md#structured-output-libraries).

The mock answers a forced tool, Gemini's `responseSchema` or Bedrock's `outputConfig` with a value of
the schema it received, seeded by the request (tools.mock.schema_values), so 100 different prompts
exercise the enum's members, the list's lengths and the nullable field's both sides.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import Enum
from typing import Any

import httpx
import instructor
import jsonschema
import openai
import orjson
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from langchain_openai import ChatOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock.bedrock import demo_credentials
from tools.mock.clouds import new_service_account
from tools.mock.upstream import start_mock

RUNS = 100
BASE_URL = "http://gateway/v1"
CAPS = ["chat", "streaming", "tools", "structured_output"]


class Priority(str, Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Step(BaseModel):
    title: str
    minutes: int
    optional: bool


class Plan(BaseModel):
    """A small nested answer: an enum, a list of objects and a nullable field."""

    name: str
    priority: Priority
    steps: list[Step]
    owner: str | None


# The links: one row each, the gateway model id and its provider (document below).
LINKS = [
    pytest.param("so-claude", id="anthropic"),
    pytest.param("so-gemini", id="gemini"),
    pytest.param("so-vertex-gemini", id="vertex-gemini"),
    pytest.param("so-vertex-claude", id="vertex-claude"),
    pytest.param("so-bedrock", id="bedrock"),
]


def document(mock: str) -> dict:
    vertex = f"{mock}/vertex/v1/projects/proj-1/locations/us-east5"
    return {
        "resilience": {"max_retries": 0},
        "providers": [
            {"name": "claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"},
            {
                "name": "gem",
                "dialect": "gemini",
                "base_url": f"{mock}/gemini/v1beta",
                "api_key_env": "SWITCHBOARD_UPSTREAM_SO_GEM",
            },
            {"name": "vx", "dialect": "vertex", "base_url": vertex, "api_key_env": "SWITCHBOARD_UPSTREAM_SO_VX"},
            {
                "name": "bed",
                "dialect": "bedrock",
                "base_url": f"{mock}/bedrock?region=us-east-1",
                "api_key_env": "SWITCHBOARD_UPSTREAM_SO_AWS",
            },
        ],
        "models": [
            {"id": "so-claude", "provider": "claude", "upstream_model": "up-claude", "capabilities": CAPS},
            {"id": "so-gemini", "provider": "gem", "upstream_model": "up-gem", "capabilities": CAPS},
            {"id": "so-vertex-gemini", "provider": "vx", "upstream_model": "gemini-so", "capabilities": CAPS},
            {"id": "so-vertex-claude", "provider": "vx", "upstream_model": "claude-so", "capabilities": CAPS},
            {"id": "so-bedrock", "provider": "bed", "upstream_model": "up-bed", "capabilities": CAPS},
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def gateway() -> AsyncIterator[None]:
    runner, port = await start_mock(0)
    url = f"http://127.0.0.1:{port}"
    account, public = new_service_account(f"{url}/vertex/token", "so@proj-1.iam.gserviceaccount.com")
    async with httpx.AsyncClient(base_url=url) as control:
        email = orjson.loads(account)["client_email"]
        (await control.post("/_control/vertex", json={"client_email": email, "public_key": public})).raise_for_status()
    previous = live.current()
    keys = {
        "SWITCHBOARD_UPSTREAM_SO_GEM": "gem-key",
        "SWITCHBOARD_UPSTREAM_SO_AWS": demo_credentials(),
        "SWITCHBOARD_UPSTREAM_SO_VX": account,
    }
    live.swap(build_snapshot(document(url), key_rows(), keys, version=1))
    yield
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()


class Wire:
    """What the library sent the gateway and what came back: (requested schema, answer text) per call."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []

    async def on_request(self, request: httpx.Request) -> None:
        self.requests.append(orjson.loads(request.content))

    async def on_response(self, response: httpx.Response) -> None:
        await response.aread()
        self.answers.append(orjson.loads(response.content))

    def http(self) -> httpx.AsyncClient:
        hooks = {"request": [self.on_request], "response": [self.on_response]}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application), event_hooks=hooks)

    def exchanges(self) -> list[tuple[dict[str, Any], str]]:
        return [(requested_schema(q), answer_text(a)) for q, a in zip(self.requests, self.answers, strict=True)]


def requested_schema(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema a chat (`response_format`) or Responses (`text.format`) request asks for."""
    if "response_format" in body:
        return body["response_format"]["json_schema"]["schema"]
    return body["text"]["format"]["schema"]


def answer_text(body: dict[str, Any]) -> str:
    """The text of a chat completion or a Responses answer (an error body: its JSON, which fails validation)."""
    if "choices" in body:
        return body["choices"][0]["message"]["content"] or ""
    if body.get("object") == "response":
        texts = [c["text"] for item in body["output"] if item["type"] == "message" for c in item["content"]]
        return "".join(texts)
    return json.dumps(body)


def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0, http_client=http)


Ask = Callable[[str], Awaitable[Any]]


def agents_sdk(http: httpx.AsyncClient, model: str) -> Ask:
    set_tracing_disabled(True)
    agent = Agent(name="planner", instructions="Plan.", output_type=Plan, model=OpenAIResponsesModel(model, sdk(http)))

    async def ask(prompt: str) -> Any:
        return (await Runner.run(agent, input=prompt)).final_output

    return ask


def pydantic_ai(http: httpx.AsyncClient, model: str) -> Ask:
    chat = OpenAIChatModel(model, provider=OpenAIProvider(openai_client=sdk(http)))
    agent = PydanticAgent(chat, output_type=NativeOutput(Plan), output_retries=0)

    async def ask(prompt: str) -> Any:
        return (await agent.run(prompt)).output

    return ask


def instructor_json_schema(http: httpx.AsyncClient, model: str) -> Ask:
    client = instructor.from_openai(sdk(http), mode=instructor.Mode.JSON_SCHEMA)

    async def ask(prompt: str) -> Any:
        messages = [{"role": "user", "content": prompt}]
        return await client.chat.completions.create(model=model, response_model=Plan, messages=messages, max_retries=1)

    return ask


def langchain(http: httpx.AsyncClient, model: str) -> Ask:
    chat = ChatOpenAI(model=model, base_url=BASE_URL, api_key=API_KEY, max_retries=0, http_async_client=http)
    return chat.with_structured_output(Plan).ainvoke


LIBRARIES = [
    pytest.param(agents_sdk, id="agents-sdk"),
    pytest.param(pydantic_ai, id="pydantic-ai"),
    pytest.param(instructor_json_schema, id="instructor"),
    pytest.param(langchain, id="langchain"),
]


@pytest.mark.parametrize("model", LINKS)
@pytest.mark.parametrize("library", LIBRARIES)
async def test_every_structured_answer_validates_against_the_requested_schema(
    gateway: None, library: Callable[[httpx.AsyncClient, str], Ask], model: str
) -> None:
    wire = Wire()
    failures: list[str] = []
    async with wire.http() as http:
        ask = library(http, model)
        for i in range(RUNS):
            try:
                out = await ask(f"Plan task number {i}.")
            except Exception as error:  # noqa: BLE001 - each failure is counted and shown below
                failures.append(f"run {i}: {type(error).__name__}: {error}"[:600])
                continue
            if not isinstance(out, Plan):
                failures.append(f"run {i}: got {out!r}"[:600])
    exchanges = wire.exchanges()
    validators: dict[bytes, Any] = {}
    invalid = [(schema, text) for schema, text in exchanges if not valid(schema, text, validators)]
    assert not failures, f"{len(failures)}/{RUNS} runs failed; first: {failures[0]}"
    assert len(exchanges) == RUNS  # one request a run: no retry hid a bad answer
    assert not invalid, f"{len(invalid)}/{RUNS} answers do not fit the schema; first: {invalid[0][1][:300]}"
    shapes = {(json.loads(text)["priority"], len(json.loads(text)["steps"])) for _, text in exchanges}
    assert len(shapes) > 3  # the answers vary with the request: the schema's choices are exercised


def valid(schema: dict[str, Any], text: str, validators: dict[bytes, Any]) -> bool:
    """Whether `text` is JSON that fits `schema` (JSON Schema 2020-12; `validators` keeps one per schema)."""
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    if key not in validators:
        validators[key] = jsonschema.Draft202012Validator(schema)
    try:
        return validators[key].is_valid(json.loads(text))
    except ValueError:
        return False
