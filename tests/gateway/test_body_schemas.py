"""Request shapes at the edge: malformed bodies name their field, documented bodies pass unchanged.

The valid bodies are what the official `openai` client itself sends for the examples
of its README and examples/ folder (captured from the client, not written by hand),
so a rule stricter than the API shows up here as a rejected real-world request.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import openai
import orjson
import pytest
from pydantic import BaseModel

from routing.core.errors import GatewayError
from routing.gateway import body_schemas

USER = [{"role": "user", "content": "hi"}]


def chat(**extra: Any) -> dict:
    return {"model": "m", "messages": USER, **extra}


def check(kind: str, body: dict) -> None:
    body_schemas.check(kind, body, orjson.dumps(body))


MALFORMED: list[tuple[str, dict, str]] = [
    # the bodies measured against a real OpenAI-compatible server (500s that opened breakers)
    ("chat", chat(temperature="x"), "temperature"),
    ("chat", {"messages": [{"role": 5, "content": "hi"}]}, "messages[0].role"),
    ("chat", chat(stop=5), "stop"),
    ("chat", chat(stop=1.5), "stop"),
    ("chat", chat(stop=True), "stop"),
    ("chat", chat(response_format=5), "response_format"),
    ("chat", chat(top_p="high"), "top_p"),
    ("chat", {"messages": [{"content": "hi"}]}, "messages[0].role"),
    ("chat", chat(max_tokens=-5), "max_tokens"),
    ("chat", {"messages": [{"role": "assistant", "content": None, "tool_calls": 5}]}, "messages[0].tool_calls"),
    # messages
    ("chat", {"model": "m"}, "messages"),
    ("chat", {"messages": "hi"}, "messages"),
    ("chat", {"messages": []}, "messages"),
    ("chat", {"messages": [5]}, "messages[0]"),
    ("chat", {"messages": [*USER, {"role": "wizard", "content": "x"}]}, "messages[1].role"),
    ("chat", {"messages": [{"role": "user"}]}, "messages[0].content"),
    ("chat", {"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("chat", {"messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]"),
    ("chat", {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}, "messages[0].content[0].type"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].image_url"),
    (
        "chat",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}]},
        "messages[0].content[0].image_url.url",
    ),
    ("chat", {"messages": [{"role": "user", "content": "hi", "name": 5}]}, "messages[0].name"),
    ("chat", {"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
    ("chat", {"messages": [{"role": "function", "content": "42"}]}, "messages[0].name"),
    ("chat", {"messages": [{"role": "assistant", "tool_calls": [5]}]}, "messages[0].tool_calls[0]"),
    ("chat", {"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]}, "messages[0].tool_calls[0].type"),
    (
        "chat",
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}
            ]
        },
        "messages[0].tool_calls[0].function.arguments",
    ),
    (
        "chat",
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
                }
            ]
        },
        "messages[0].tool_calls[0].function.arguments",
    ),
    # sampling and limits
    ("chat", chat(temperature=2.5), "temperature"),
    ("chat", chat(temperature=-0.1), "temperature"),
    ("chat", chat(temperature=True), "temperature"),
    ("chat", chat(top_p=1.5), "top_p"),
    ("chat", chat(max_tokens=0), "max_tokens"),
    ("chat", chat(max_tokens=5.5), "max_tokens"),
    ("chat", chat(max_tokens="100"), "max_tokens"),
    ("chat", chat(max_tokens=True), "max_tokens"),
    ("chat", chat(max_tokens=10**12), "max_tokens"),
    ("chat", chat(max_completion_tokens=-1), "max_completion_tokens"),
    ("chat", chat(n=0), "n"),
    ("chat", chat(n=1000), "n"),
    ("chat", chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    ("chat", chat(stop=[5]), "stop[0]"),
    ("chat", chat(presence_penalty=3), "presence_penalty"),
    ("chat", chat(frequency_penalty="x"), "frequency_penalty"),
    ("chat", chat(seed=1.5), "seed"),
    ("chat", chat(seed=2**63), "seed"),
    ("chat", chat(user=5), "user"),
    ("chat", chat(logit_bias=[1]), "logit_bias"),
    ("chat", chat(logit_bias={"50256": 101}), "logit_bias"),
    ("chat", chat(logit_bias={"not-a-token": 1}), "logit_bias"),
    ("chat", chat(logprobs="yes"), "logprobs"),
    ("chat", chat(top_logprobs=21), "top_logprobs"),
    ("chat", chat(top_k=-1), "top_k"),
    ("chat", chat(stream="yes"), "stream"),
    ("chat", chat(stream_options=5), "stream_options"),
    ("chat", chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    ("chat", chat(model=5), "model"),
    # tools and formats
    ("chat", chat(tools=5), "tools"),
    ("chat", chat(tools=[5]), "tools[0]"),
    ("chat", chat(tools=[{"type": "retrieval"}]), "tools[0].type"),
    ("chat", chat(tools=[{"type": "function"}]), "tools[0].function"),
    ("chat", chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
    (
        "chat",
        chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
        "tools[0].function.parameters",
    ),
    ("chat", chat(tool_choice="always"), "tool_choice"),
    ("chat", chat(tool_choice=5), "tool_choice"),
    ("chat", chat(tool_choice={"type": "function"}), "tool_choice.function"),
    ("chat", chat(tool_choice={"type": "function", "function": {"name": 5}}), "tool_choice.function.name"),
    ("chat", chat(parallel_tool_calls="no"), "parallel_tool_calls"),
    ("chat", chat(response_format={"type": "xml"}), "response_format.type"),
    ("chat", chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
    (
        "chat",
        chat(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
        "response_format.json_schema.name",
    ),
    ("chat", chat(metadata={"k": 5}), "metadata"),
    # embeddings
    ("embeddings", {"model": "e"}, "input"),
    ("embeddings", {"input": 5}, "input"),
    ("embeddings", {"input": ""}, "input"),
    ("embeddings", {"input": []}, "input"),
    ("embeddings", {"input": [None]}, "input[0]"),
    ("embeddings", {"input": ["a", ""]}, "input[1]"),
    ("embeddings", {"input": ["a", 1]}, "input[1]"),
    ("embeddings", {"input": [1, -2]}, "input[1]"),
    ("embeddings", {"input": [[1], []]}, "input[1]"),
    ("embeddings", {"input": ["a"] * 2049}, "input"),
    ("embeddings", {"input": "a", "dimensions": 0}, "dimensions"),
    ("embeddings", {"input": "a", "dimensions": "256"}, "dimensions"),
    ("embeddings", {"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ("embeddings", {"input": "a", "user": 5}, "user"),
    ("embeddings", {"input": "a", "input_type": 5}, "input_type"),
    # rerank
    ("rerank", {"documents": ["a"]}, "query"),
    ("rerank", {"query": 5, "documents": ["a"]}, "query"),
    ("rerank", {"query": "q"}, "documents"),
    ("rerank", {"query": "q", "documents": "a"}, "documents"),
    ("rerank", {"query": "q", "documents": []}, "documents"),
    ("rerank", {"query": "q", "documents": ["a", 3]}, "documents[1]"),
    ("rerank", {"query": "q", "documents": [{"title": "a"}]}, "documents[0].text"),
    ("rerank", {"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ("rerank", {"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    # responses
    ("responses", {"input": 5}, "input"),
    ("responses", {"input": [5]}, "input[0]"),
    ("responses", {"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ("responses", {"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ("responses", {"input": [{"role": "user", "content": [{"text": "x"}]}]}, "input[0].content[0].type"),
    ("responses", {"input": "x", "instructions": 5}, "instructions"),
    ("responses", {"input": "x", "max_output_tokens": -5}, "max_output_tokens"),
    ("responses", {"input": "x", "temperature": "hot"}, "temperature"),
    ("responses", {"input": "x", "tools": [{"name": "f"}]}, "tools[0].type"),
    ("responses", {"input": "x", "text": {"format": 5}}, "text.format"),
    ("responses", {"input": "x", "stream": "no"}, "stream"),
]


@pytest.mark.parametrize(
    ("kind", "body", "param"), MALFORMED, ids=[f"{k}-{p}-{i}" for i, (k, _, p) in enumerate(MALFORMED)]
)
def test_malformed_body_is_400_invalid_request_naming_the_field(kind: str, body: dict, param: str) -> None:
    with pytest.raises(GatewayError) as info:
        check(kind, body)
    error = info.value
    assert (error.status, error.code, error.param) == (400, "invalid_request", param)
    assert param in error.message and "nothing was sent upstream" in error.message


def test_a_bad_role_lists_the_roles_to_use() -> None:
    with pytest.raises(GatewayError) as info:
        check("chat", {"messages": [{"role": "wizard", "content": "x"}]})
    assert "system, developer, user, assistant, tool, function" in info.value.message


def test_unknown_fields_and_content_part_types_pass_through() -> None:
    body = chat(
        vendor_extension={"anything": [1, 2]},
        messages=[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}], "x-note": 1}],
    )
    before = copy.deepcopy(body)
    check("chat", body)
    assert body == before


@pytest.mark.parametrize(
    "item",
    [
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": None},
        {"type": "reasoning", "id": "rs_1", "summary": None, "status": None, "encrypted_content": "gAAAA"},
        {"type": "function_call_output", "call_id": "c", "output": "ok", "id": None, "status": None},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": None}], "id": None},
        {"type": "hologram_call", "anything": [None]},
    ],
)
def test_responses_items_echoed_back_with_openais_nulls_are_accepted(item: dict) -> None:
    # a stateless client (Codex, store: false) sends its earlier output items back as it got them
    check("responses", {"model": "m", "input": [{"role": "user", "content": "hi"}, item]})


# --- nesting depth -------------------------------------------------------------------


def nested_raw(
    levels: int, field: bytes = b"extra", prefix: bytes = b'"messages": [{"role": "user", "content": "hi"}]'
) -> bytes:
    """A body whose `field` holds arrays nested `levels` deep (the body object is one more level)."""
    return b"{" + prefix + b', "' + field + b'": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize("levels", [254, 600, 1022])
def test_body_nested_past_the_encoder_limit_is_400_naming_the_field(levels: int) -> None:
    raw = nested_raw(levels, b"extra")
    body = orjson.loads(raw)
    with pytest.raises(GatewayError) as info:
        body_schemas.check("chat", body, raw)
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", "extra")
    assert "nested more than 254 levels" in info.value.message


def test_deep_tool_parameters_are_caught_too() -> None:
    deep = b"[" * 300 + b"]" * 300
    raw = (
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"d": '
        + deep
        + b"}}}]}"
    )
    with pytest.raises(GatewayError) as info:
        body_schemas.check("chat", orjson.loads(raw), raw)
    assert info.value.param == "tools"


def test_deepest_body_the_encoder_takes_is_accepted() -> None:
    raw = nested_raw(253)
    body = orjson.loads(raw)
    body_schemas.check("chat", body, raw)
    orjson.dumps(body)


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [("embeddings", b'"input": "a"'), ("rerank", b'"query": "q", "documents": ["d"]'), ("responses", b'"input": "x"')],
)
def test_deep_value_in_an_unvalidated_field_of_any_endpoint_is_caught(kind: str, prefix: bytes) -> None:
    raw = nested_raw(500, b"vendor", prefix)
    with pytest.raises(GatewayError) as info:
        body_schemas.check(kind, orjson.loads(raw), raw)
    assert info.value.param == "vendor"


# --- valid bodies: what the official client sends for its documented examples -----------


class Step(BaseModel):
    explanation: str
    output: str


class MathResponse(BaseModel):
    steps: list[Step]
    final_answer: str


class Query(BaseModel):
    table_name: str
    columns: list[str]
    order_by: str


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
IMG = "https://upload.wikimedia.org/wikipedia/commons/thumb/d/d5/2023_06_08_Raccoon1.jpg/1599px-2023_06_08_Raccoon1.jpg"


def _documented_calls(client: openai.OpenAI) -> list:
    c = client
    return [
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "developer", "content": "Talk like a pirate."},
                {"role": "user", "content": "How do I check if a Python object is an instance of a class?"},
            ],
        ),
        lambda: c.chat.completions.create(messages=[{"role": "user", "content": "Say this is a test"}], model="gpt-4o"),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "How much ?"}],
            response_format={"type": "json_object"},
        ),
        lambda: c.chat.completions.parse(
            model="gpt-4o-2024-08-06",
            messages=[
                {"role": "system", "content": "You are a helpful math tutor."},
                {"role": "user", "content": "solve 8x + 31 = 2"},
            ],
            response_format=MathResponse,
        ),
        lambda: c.chat.completions.parse(
            model="gpt-4o-2024-08-06",
            messages=[
                {"role": "system", "content": "You help users query for the data they are looking for."},
                {"role": "user", "content": "look up all my orders in november of last year"},
            ],
            tools=[openai.pydantic_function_tool(Query)],
        ),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Say this is a test"}],
            stream=True,
            stream_options={"include_usage": True},
        ),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What's in this image?"},
                        {"type": "image_url", "image_url": {"url": IMG, "detail": "low"}},
                    ],
                }
            ],
            max_completion_tokens=300,
        ),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "What's the weather like in Boston today?"}],
            tools=[WEATHER_TOOL],
            tool_choice="auto",
        ),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "user", "content": "What's the weather like in Boston today?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_abc123",
                            "type": "function",
                            "function": {"name": "get_current_weather", "arguments": '{"location": "Boston, MA"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temperature": "22", "unit": "celsius"}'},
            ],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_current_weather"}},
            parallel_tool_calls=False,
        ),
        lambda: c.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Hello!"}],
            logprobs=True,
            top_logprobs=2,
            temperature=0.7,
            top_p=1,
            n=1,
            stop=["\n"],
            max_tokens=100,
            presence_penalty=0,
            frequency_penalty=0.5,
            logit_bias={"50256": -100},
            seed=42,
            user="user-1234",
            metadata={"session": "abc"},
            store=False,
        ),
        lambda: c.embeddings.create(
            model="text-embedding-ada-002",
            input="The food was delicious and the waiter...",
            encoding_format="float",
        ),
        lambda: c.embeddings.create(model="text-embedding-3-small", input=["first", "second"], dimensions=256),
        lambda: c.embeddings.create(model="text-embedding-3-small", input=[[1, 2, 3], [4, 5]]),
        lambda: c.responses.create(
            model="gpt-4o",
            instructions="You are a coding assistant that talks like a pirate.",
            input="How do I check if a Python object is an instance of a class?",
        ),
        lambda: c.responses.create(
            model="gpt-4o-mini",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is in this image?"},
                        {"type": "input_image", "image_url": IMG},
                    ],
                }
            ],
        ),
        lambda: c.responses.create(
            model="gpt-4o-mini",
            input=[
                {"role": "developer", "content": "Use the supplied function results to answer."},
                {"role": "user", "content": "What is the current order status?"},
                {
                    "type": "function_call",
                    "call_id": "call_123",
                    "name": "get_order_status",
                    "arguments": '{"order_id":"order_123"}',
                },
                {"type": "function_call_output", "call_id": "call_123", "output": '{"status":"shipped"}'},
            ],
        ),
        lambda: c.responses.parse(model="gpt-4o-2024-08-06", input="solve 8x + 31 = 2", text_format=MathResponse),
        lambda: c.responses.create(
            model="gpt-4o", input="Write a one-sentence bedtime story about a unicorn.", stream=True
        ),
    ]


_KINDS = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings", "/v1/responses": "responses"}


def captured_bodies() -> list[tuple[str, dict]]:
    """Run the documented calls through the real client against a transport that records them."""
    sent: list[tuple[str, dict]] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append((_KINDS[request.url.path], json.loads(request.content)))
        return httpx.Response(500, json={"error": {"message": "recorded"}})

    http = httpx.Client(transport=httpx.MockTransport(record))
    client = openai.OpenAI(base_url="http://capture/v1", api_key="sk-test", http_client=http, max_retries=0)
    for call in _documented_calls(client):
        with pytest.raises(openai.APIError):
            call()
    return sent


CAPTURED = captured_bodies()
RERANK_EXAMPLES = [
    {
        "model": "rerank-v3.5",
        "query": "What is the capital of the United States?",
        "top_n": 3,
        "documents": [
            "Carson City is the capital city of the American state of Nevada.",
            "Washington, D.C. is the capital of the United States.",
            "Capital punishment has existed in the United States since before it was a country.",
        ],
    },
    {
        "model": "jina-reranker-v2",
        "query": "organic skincare",
        "documents": [{"text": "Organic skincare for sensitive skin"}],
    },
]


def test_every_documented_example_was_captured() -> None:
    assert len(CAPTURED) == len(_documented_calls(openai.OpenAI(api_key="x")))
    assert {kind for kind, _ in CAPTURED} == {"chat", "embeddings", "responses"}


@pytest.mark.parametrize(
    ("kind", "body"),
    [*CAPTURED, *(("rerank", b) for b in RERANK_EXAMPLES)],
    ids=[f"{k}-{i}" for i, (k, _) in enumerate([*CAPTURED, *(("rerank", b) for b in RERANK_EXAMPLES)])],
)
def test_documented_request_is_accepted_unchanged(kind: str, body: dict) -> None:
    before = copy.deepcopy(body)
    check(kind, body)
    assert body == before


def test_a_new_endpoint_can_register_its_own_shape() -> None:
    import msgspec

    class Ping(msgspec.Struct):
        count: int

    body_schemas.register("ping-test", body_schemas.BodySchema(Ping))
    try:
        check("ping-test", {"count": 1})
        with pytest.raises(GatewayError) as info:
            check("ping-test", {"count": "1"})
        assert info.value.param == "count"
    finally:
        del body_schemas.BODY_SCHEMAS["ping-test"]


# --- integers with a zero fraction (JSON Schema counts 1.0 as an integer) ------------------


@pytest.mark.parametrize(
    ("kind", "body", "fixed"),
    [
        ("chat", chat(n=1.0, max_tokens=10.0, seed=3.0, top_logprobs=2.0), {"n": 1, "max_tokens": 10, "seed": 3}),
        ("chat", chat(max_completion_tokens=64.0), {"max_completion_tokens": 64}),
        ("embeddings", {"input": [[1.0, 2.0, 3], [4.0]], "dimensions": 8.0}, {"input": [[1, 2, 3], [4]]}),
        ("completions", {"prompt": "x", "max_tokens": 5.0, "n": 2.0, "logprobs": 1.0}, {"max_tokens": 5, "n": 2}),
        ("rerank", {"query": "q", "documents": ["a"], "top_n": 1.0}, {"top_n": 1}),
        ("responses", {"input": "x", "max_output_tokens": 16.0}, {"max_output_tokens": 16}),
    ],
)
def test_a_whole_number_written_with_a_zero_fraction_is_an_integer(kind, body, fixed) -> None:
    check(kind, body)
    for name, value in fixed.items():
        assert body[name] == value and type(body[name]) is type(value)  # the upstream gets 1, not 1.0
    if kind == "embeddings":
        assert orjson.dumps(body["input"]) == b"[[1,2,3],[4]]"


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        ("chat", chat(n=1.5), "n"),
        ("chat", chat(max_tokens=10.25), "max_tokens"),
        ("rerank", {"query": "q", "documents": ["a"], "top_n": 0.5}, "top_n"),
    ],
)
def test_a_fraction_where_an_integer_is_expected_is_still_refused_clearly(kind, body, param) -> None:
    with pytest.raises(GatewayError) as info:
        check(kind, body)
    assert (info.value.status, info.value.param) == (400, param)
    assert "must be a whole number such as 2 (2.0 is fine too), not a fraction" in info.value.message


def test_a_zero_fraction_past_the_bound_is_refused_by_the_bound() -> None:
    with pytest.raises(GatewayError) as info:
        check("chat", chat(n=1000.0))
    assert info.value.param == "n" and "128" in info.value.message
