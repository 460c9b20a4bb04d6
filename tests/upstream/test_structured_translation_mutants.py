"""A chat client served by a Claude or Gemini link, pinned field by field (docs/translation.md):
the Anthropic request built from a chat body (content blocks, tools, tool_choice, the structured
tool, the thinking budget), Claude's answer and SSE stream as the chat shape the client sees
(content, reasoning, tool calls, finish_reason, usage, errors), and Gemini's generationConfig for
a json_schema and a reasoning_effort. Pure functions on recorded shapes, in process; each test
kills mutants the broader tests let live (docs/testing.md "Mutation testing")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.sse import DONE
from routing.upstream.translate.anthropic_structured import STRUCTURED_TOOL
from routing.upstream.translate.chat_to_anthropic import (
    anthropic_request,
    chat_completion_of,
    gaps,
    translate_sse,
    translate_tool_choice,
)
from routing.upstream.translate.chat_to_gemini import gemini_request

USER = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def refusal(call: Any, *args: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        call(*args)
    return caught.value


# --- chat request -> Anthropic request ---------------------------------------------------


def test_content_parts_become_blocks_in_order_and_a_text_part_without_text_is_empty():
    parts = ["plain", {"type": "text"}, {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]
    out = anthropic_request({"messages": [{"role": "user", "content": parts}]}, "up", False)
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "plain"},
                {"type": "text", "text": ""},
                {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("content", "param", "words"),
    [
        ([{"type": "image_url", "image_url": {}}], "messages[0].content[0]", "image_url.url"),
        (["ok", 7], "messages[0].content[1]", "messages[0].content[1] must be a content part object"),
        ([{"type": "audio"}], "messages[0].content[0]", "content part type 'audio' cannot be sent"),
        (5, "messages[0].content", "must be a string or a list"),
    ],
)
def test_a_bad_content_part_is_refused_naming_its_place(content, param, words):
    error = refusal(anthropic_request, {"messages": [{"role": "user", "content": content}]}, "up", False)
    assert error.param == param and words in error.message


def test_a_tool_result_without_a_call_id_and_a_tool_without_parameters():
    body = {
        "messages": [*USER, {"role": "tool", "content": "42"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    out = anthropic_request(body, "up", False)
    assert out["messages"][-1]["content"][-1] == {"type": "tool_result", "tool_use_id": "", "content": "42"}
    assert out["tools"] == [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        (None, True, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("none", False, {"type": "none"}),
        ("auto", None, {"type": "auto"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ({"type": "function", "function": {"name": "f"}}, None, {"type": "tool", "name": "f"}),
    ],
)
def test_tool_choice_and_parallel_tool_calls(choice, parallel, expected):
    assert translate_tool_choice(choice, parallel) == expected


def test_a_tool_choice_without_tools_is_not_sent():
    out = anthropic_request({"messages": USER, "tool_choice": "required"}, "up", False)
    assert "tool_choice" not in out and "tools" not in out


def test_gaps_refuse_n_and_logprobs_naming_the_model_and_drop_seed():
    model = SimpleNamespace(id="claude-x", provider=SimpleNamespace(dialect="anthropic"))
    for field, value in (("n", 2), ("logprobs", True)):
        error = refusal(gaps, {field: value}, model)
        assert error.param == field and "'claude-x'" in error.message and "anthropic provider" in error.message
    assert gaps({"seed": 1, "n": 1}, model) == ("seed",)


# --- Anthropic message -> chat.completion -----------------------------------------------


def test_an_answer_joins_its_texts_and_thoughts_and_skips_what_is_not_a_block():
    message = {
        "content": [
            "junk",
            {"type": "thinking", "thinking": "a"},
            {"type": "thinking", "thinking": None},
            {"type": "thinking", "thinking": "b"},
            {"type": "text", "text": "Hel"},
            {"type": "text"},
            {"type": "text", "text": "lo"},
        ],
        "stop_reason": "stop_sequence",
    }
    out, _, _ = chat_completion_of(message, "up")
    assert out["id"] == "" and out["model"] == "up"
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hello", "reasoning_content": "ab"}
    assert "stop_reason" not in out["choices"][0]  # no sequence named: nothing to name


def test_an_empty_thought_still_comes_back_as_empty_reasoning():
    out, _, _ = chat_completion_of({"content": [{"type": "thinking", "thinking": None}]}, "up")
    assert out["choices"][0]["message"] == {"role": "assistant", "content": None, "reasoning_content": ""}


def test_a_tool_call_only_answer_has_null_content():
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    out, _, _ = chat_completion_of({"content": [block], "stop_reason": "tool_use"}, "up")
    assert out["choices"][0]["message"]["content"] is None
    assert out["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("stop_reason", "sequence", "finish", "named"),
    [
        ("stop_sequence", "END", "stop", "END"),
        ("end_turn", "END", "stop", None),
        ("something_new", None, "stop", None),
        ("max_tokens", None, "length", None),
    ],
)
def test_finish_reason_and_the_named_stop_sequence(stop_reason, sequence, finish, named):
    out, _, _ = chat_completion_of({"content": [], "stop_reason": stop_reason, "stop_sequence": sequence}, "up")
    assert out["choices"][0]["finish_reason"] == finish
    assert out["choices"][0].get("stop_reason") == named


# --- Anthropic SSE -> chat.completion.chunk ---------------------------------------------


async def frames_of(*events: Any, split: bool = False, model: str = "up") -> list[Any]:
    """The decoded frames a chat client gets for these Anthropic events (raw bytes pass as they are)."""
    raw = [e if isinstance(e, bytes) else b"event: x\ndata: " + orjson.dumps(e) + b"\n\n" for e in events]

    async def chunks() -> AsyncIterator[bytes]:
        if split:
            for r in raw:
                yield r
        else:
            yield b"".join(raw)

    out = []
    async for frame in translate_sse(chunks(), SimpleNamespace(upstream_model=model)):  # type: ignore[arg-type]
        out.append("DONE" if frame == DONE else orjson.loads(frame.removeprefix(b"data: ")))
    return out


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def start(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def stop(reason: str, usage: dict[str, Any] | None = None, sequence: str | None = None) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage or {}}


END = {"type": "message_stop"}


async def test_a_stream_without_message_start_keeps_the_links_model_and_counts_from_message_delta():
    frames = await frames_of(
        start(0, type="text", text="Hel"),
        delta(0, type="text_delta", text="lo"),
        delta(0, type="text_delta"),
        stop("end_turn", {"input_tokens": 7, "output_tokens": 3}),
        END,
    )
    first, second, third, last, done = frames
    assert first["id"] == "" and first["model"] == "up"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hel"}
    assert second["choices"][0]["delta"] == {"content": "lo"}
    assert third["choices"][0]["delta"] == {"content": ""}
    assert last["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert done == "DONE"


async def test_the_prompt_count_of_message_start_is_not_replaced_and_missing_counts_are_zero():
    begin = {"type": "message_start", "message": {"model": "m2", "usage": {"input_tokens": 5}}}
    frames = await frames_of(begin, stop("end_turn", {"input_tokens": 99}), END)
    assert frames[0]["id"] == "" and frames[0]["model"] == "m2"
    assert frames[0]["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}
    frames = await frames_of(stop("end_turn"), END)
    assert frames[0]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


async def test_streamed_thinking_and_tool_calls_without_optional_fields():
    frames = await frames_of(
        delta(0, type="thinking_delta"),
        start(1, type="tool_use"),
        delta(1, type="input_json_delta"),
        delta(1, type="input_json_delta", partial_json='{"a"'),
        {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "lost"}},
        stop("tool_use"),
        END,
    )
    deltas = [f["choices"][0]["delta"] for f in frames[:-2]]
    assert deltas == [
        {"role": "assistant", "reasoning_content": ""},
        {"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
    ]  # a delta naming no block is no tool's arguments
    assert frames[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_structured_answer_beside_a_client_tool_keeps_each_in_its_place():
    frames = await frames_of(
        start(0, type="tool_use", id="t0", name="lookup"),
        delta(0, type="input_json_delta", partial_json="{}"),
        start(1, type="tool_use", id="t1", name=STRUCTURED_TOOL),
        delta(1, type="input_json_delta"),
        delta(1, type="input_json_delta", partial_json='{"q":1}'),
        stop("tool_use"),
        END,
    )
    deltas = [f["choices"][0]["delta"] for f in frames[:-2]]
    assert deltas[1] == {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
    assert deltas[2:] == [{"content": ""}, {"content": '{"q":1}'}]
    assert frames[-2]["choices"][0]["finish_reason"] == "tool_calls"  # the client's own tool was called


async def test_a_structured_answer_cut_by_max_tokens_finishes_with_length():
    frames = await frames_of(
        start(0, type="tool_use", id="t1", name=STRUCTURED_TOOL),
        delta(0, type="input_json_delta", partial_json='{"q":'),
        stop("max_tokens", {"output_tokens": 9}),
        END,
    )
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": '{"q":'}
    assert frames[1]["choices"][0]["finish_reason"] == "length"


async def test_a_tool_use_stop_without_any_tool_block_stays_tool_calls():
    frames = await frames_of(stop("tool_use"), END)
    assert frames[0]["choices"][0]["finish_reason"] == "tool_calls"


async def test_a_tool_delta_without_an_index_reaches_no_tool():
    frames = await frames_of(
        start(1, type="tool_use", id="t", name="f"),
        {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "x"}},
        stop("tool_use"),
        END,
    )
    assert len(frames) == 3  # the call's start, the finish, [DONE]: "x" belongs to no call


async def test_a_streamed_stop_sequence_is_named():
    frames = await frames_of(stop("stop_sequence", sequence="END"), END)
    choice = frames[0]["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "END"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("boom", {"message": "boom", "type": "api_error"}),
        ({}, {"message": "the upstream stream reported an error", "type": "api_error"}),
        ({"type": "overloaded_error", "message": "busy"}, {"message": "busy", "type": "overloaded_error"}),
    ],
)
async def test_an_upstream_stream_error_reaches_the_client_as_one_error_frame(error, expected):
    frames = await frames_of({"type": "error", "error": error}, END)
    assert frames == [{"error": {**expected, "code": "upstream_stream_error", "param": None}}]


async def test_an_event_that_is_not_json_ends_the_stream_with_an_error():
    frames = await frames_of(b"data: {nope\n\n", delta(0, type="text_delta", text="late"), END, split=True)
    assert frames == [
        {
            "error": {
                "message": "the upstream sent an SSE event that is not JSON",
                "type": "invalid_stream",
                "code": "upstream_stream_error",
                "param": None,
            }
        }
    ]


# --- response_format and reasoning_effort on a Claude link (anthropic_structured) -------


def claude(body: dict[str, Any], max_output_tokens: int | None = None) -> dict[str, Any]:
    return anthropic_request({"messages": USER, **body}, "up", False, max_output_tokens)


HINT = "Answer by calling this tool: its input is the whole answer, as JSON."


@pytest.mark.parametrize(
    ("fmt", "schema", "description"),
    [
        ({"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}, SCHEMA, HINT),
        (
            {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "description": "A search."}},
            SCHEMA,
            HINT + " A search.",
        ),
        ({"type": "json_schema", "json_schema": {"name": "s", "description": 3}}, {"type": "object"}, HINT),
        ({"type": "json_object", "json_schema": {"schema": SCHEMA}}, {"type": "object"}, HINT),
    ],
)
def test_a_structured_format_is_one_forced_tool(fmt, schema, description):
    out = claude({"response_format": fmt})
    assert out["tools"] == [{"name": STRUCTURED_TOOL, "description": description, "input_schema": schema}]
    assert out["tool_choice"] == {"type": "tool", "name": STRUCTURED_TOOL}


@pytest.mark.parametrize("fmt", [{"type": "text"}, "json_object", {"json_schema": {"schema": SCHEMA}}])
def test_a_text_or_malformed_format_adds_no_tool(fmt):
    out = claude({"response_format": fmt})
    assert "tools" not in out and "tool_choice" not in out


def test_a_client_tool_may_not_take_the_gateways_name():
    tools = [{"type": "function", "function": {"name": STRUCTURED_TOOL}}]
    error = refusal(claude, {"tools": tools, "response_format": {"type": "json_object"}})
    assert error.param == "tools" and STRUCTURED_TOOL in error.message


@pytest.mark.parametrize(
    ("effort", "limit", "budget"),
    [
        ("minimal", None, 1024),
        ("low", None, 2048),
        ("medium", None, 8192),
        ("high", None, 16384),
        ("high", 10000, 10000 - 1024),
        ("medium", 9216, 8192),
        ("medium", 9215, 8191),
        ("low", 1500, 1024),  # never under Anthropic's minimum
    ],
)
def test_reasoning_effort_is_a_budget_inside_the_models_range(effort, limit, budget):
    out = claude({"reasoning_effort": effort, "max_tokens": 100}, limit)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["max_tokens"] == 100 + budget


def test_reasoning_effort_none_or_absent_asks_no_thinking():
    for body in ({"reasoning_effort": "none"}, {}):
        out = claude({**body, "temperature": 0.5, "max_tokens": 100})
        assert "thinking" not in out and out["max_tokens"] == 100 and out["temperature"] == 0.5


def test_an_unknown_reasoning_effort_is_refused_with_the_choices():
    error = refusal(claude, {"reasoning_effort": "extreme"})
    assert error.param == "reasoning_effort"
    assert "reasoning_effort must be one of minimal, low, medium, high." in error.message


@pytest.mark.parametrize("name", ["temperature", "top_p", "top_k"])
def test_sampling_beside_reasoning_is_refused_by_name(name):
    error = refusal(claude, {"reasoning_effort": "low", name: 0.5})
    assert error.param == name and f"{name} cannot be sent beside reasoning_effort" in error.message


def test_a_structured_format_beside_reasoning_is_refused():
    error = refusal(claude, {"reasoning_effort": "low", "response_format": {"type": "json_object"}})
    assert error.param == "response_format"
    assert "a structured response_format cannot be sent beside reasoning_effort to Claude." in error.message
    out = claude({"reasoning_effort": "low", "response_format": {"type": "text"}})
    assert "tools" not in out and out["thinking"]["budget_tokens"] == 2048


# --- response_format and reasoning_effort on a Gemini link (gemini_structured) ----------


def gemini(body: dict[str, Any], upstream: str = "gemini-2.5-flash", limit: int | None = None) -> dict[str, Any]:
    """The generationConfig a chat body reaches Gemini with ({} when it has none)."""
    model = SimpleNamespace(
        id="gem", upstream_model=upstream, max_output_tokens=limit, provider=SimpleNamespace(dialect="vertex")
    )
    return gemini_request({"messages": USER, **body}, model).get("generationConfig", {})  # type: ignore[arg-type]


def gemini_schema(schema: Any) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    return gemini({"response_format": fmt})["responseJsonSchema"]


def gemini_refusal(schema: Any) -> GatewayError:
    error = refusal(gemini_schema, schema)
    assert "'gem'" in error.message and "vertex provider" in error.message and "speaks chat itself" in error.message
    return error


@pytest.mark.parametrize(
    ("fmt", "config"),
    [
        ({"type": "text"}, {}),
        ("json_object", {}),
        ({"type": "json_object", "json_schema": {"schema": SCHEMA}}, {"responseMimeType": "application/json"}),
        ({"type": "json_schema", "json_schema": {"name": "s"}}, {"responseMimeType": "application/json"}),
        ({"type": "json_schema", "json_schema": "s"}, {"responseMimeType": "application/json"}),
        (
            {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
            {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA},
        ),
    ],
)
def test_a_response_format_becomes_gemini_json_output(fmt, config):
    assert gemini({"response_format": fmt}) == config


def test_a_schema_loses_its_annotations_and_keeps_every_keyword_gemini_honours():
    kept = {
        "$id": "x",
        "$anchor": "a",
        "type": "array",
        "format": "f",
        "title": "t",
        "description": "d",
        "items": {"type": "number", "minimum": 0, "maximum": 9},
        "prefixItems": [{"type": "string"}, True],
        "minItems": 1,
        "maxItems": 3,
        "propertyOrdering": ["a"],
    }
    notes = {"$schema": "s", "$comment": "c", "default": 1, "examples": [], "example": 1}
    notes |= {"readOnly": True, "writeOnly": False, "deprecated": False}
    assert gemini_schema({**kept, **notes}) == kept
    obj = {
        "type": "object",
        "properties": {"a": {"oneOf": [{"type": "string"}, {"enum": ["x", 1, 2.5]}], "const": "z"}},
        "additionalProperties": {"anyOf": [{"type": "null"}]},
        "required": ["a"],
    }
    converted = gemini_schema(obj)
    assert converted["properties"]["a"] == {"oneOf": [{"type": "string"}, {"enum": ["x", 1, 2.5]}], "enum": ["z"]}
    assert converted["additionalProperties"] == {"anyOf": [{"type": "null"}]} and converted["required"] == ["a"]


def test_definitions_become_defs_and_their_references_follow():
    schema = {
        "definitions": {"Item": {"type": "string"}},
        "properties": {"a": {"$ref": "#/definitions/Item", "description": "an item", "title": "A", "default": 1}},
    }
    assert gemini_schema(schema) == {
        "$defs": {"Item": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/Item"}},
    }
    both = {"$defs": {}, "definitions": {}, "properties": {"a": {"$ref": "#/definitions/Item"}}}
    assert gemini_schema(both)["properties"]["a"] == {"$ref": "#/definitions/Item"}  # not rewritten
    other = {"definitions": {}, "properties": {"a": {"$ref": "other.json#/x", "$comment": "c"}}}
    assert gemini_schema(other)["properties"]["a"] == {"$ref": "other.json#/x", "$comment": "c"}
    assert gemini_schema({"definitions": {}, "items": {"$ref": 3}})["items"] == {"$ref": 3}


def test_an_all_of_of_one_schema_is_that_schema():
    schema = {"properties": {"a": {"allOf": [{"$ref": "#/$defs/I"}], "description": "an a"}}}
    assert gemini_schema(schema)["properties"]["a"] == {"$ref": "#/$defs/I"}
    wrapped = {"properties": {"a": {"allOf": [{"type": "string"}], "description": "an a"}}}
    assert gemini_schema(wrapped)["properties"]["a"] == {"type": "string", "description": "an a"}


P = "response_format.json_schema.schema"


@pytest.mark.parametrize(
    ("schema", "param"),
    [
        ({"pattern": "x"}, f"{P}.pattern"),
        ({"properties": {"a": {"minLength": 1}}}, f"{P}.properties.a.minLength"),
        ({"properties": []}, f"{P}.properties"),
        ({"$defs": {"A": 3}}, f"{P}.$defs.A"),
        ({"anyOf": {"type": "string"}}, f"{P}.anyOf"),
        ({"oneOf": [{"type": "string"}, {"not": {}}]}, f"{P}.oneOf[1].not"),
        ({"prefixItems": [{"uniqueItems": True}]}, f"{P}.prefixItems[0].uniqueItems"),
        ({"items": {"pattern": "x"}}, f"{P}.items.pattern"),
        ({"additionalProperties": {"pattern": "x"}}, f"{P}.additionalProperties.pattern"),
        ({"enum": [True, "a"]}, f"{P}.enum"),
        ({"enum": [None]}, f"{P}.enum"),
        ({"enum": "a"}, f"{P}.enum"),
        ({"const": {"a": 1}}, f"{P}.const"),
        ({"allOf": [{"type": "string"}, {"type": "number"}]}, f"{P}.allOf"),
        ({"allOf": [3]}, f"{P}.allOf"),
        ({"allOf": {"type": "string"}}, f"{P}.allOf"),
        ({"properties": {"a": {"allOf": []}}}, f"{P}.properties.a.allOf"),
        ({"properties": {"a": {"$ref": "#/$defs/A", "type": "string"}}}, f"{P}.properties.a.type"),
    ],
)
def test_a_keyword_gemini_cannot_honour_is_refused_by_its_path(schema, param):
    assert gemini_refusal(schema).param == param


@pytest.mark.parametrize(
    ("upstream", "effort", "limit", "thinking"),
    [
        ("gemini-2.5-flash", "minimal", None, {"thinkingBudget": 512, "includeThoughts": True}),
        ("gemini-2.5-flash", "low", None, {"thinkingBudget": 1024, "includeThoughts": True}),
        ("gemini-2.5-flash", "medium", None, {"thinkingBudget": 8192, "includeThoughts": True}),
        ("gemini-2.5-flash", "high", None, {"thinkingBudget": 24576, "includeThoughts": True}),
        ("models/gemini-2.5-pro", "high", None, {"thinkingBudget": 24576, "includeThoughts": True}),
        ("gemini-2.5-flash", "high", 4096, {"thinkingBudget": 3072, "includeThoughts": True}),
        ("gemini-2.5-flash", "low", 1000, {"thinkingBudget": 1, "includeThoughts": True}),  # the flash minimum
        ("gemini-2.5-pro", "low", 1100, {"thinkingBudget": 128, "includeThoughts": True}),
        ("gemini-2.5-flash-lite", "low", 1100, {"thinkingBudget": 512, "includeThoughts": True}),
        ("gemini-2.5-flash-lite", "high", 2048 + 1024, {"thinkingBudget": 2048, "includeThoughts": True}),
        ("gemini-2.5-flash-lite", "none", None, {"thinkingBudget": 0}),
        ("models/gemini-2.5-flash", "none", None, {"thinkingBudget": 0}),
        ("gemini-3-pro-preview", "minimal", None, {"thinkingLevel": "low", "includeThoughts": True}),
        ("gemini-3-pro-preview", "medium", None, {"thinkingLevel": "high", "includeThoughts": True}),
        ("models/gemini-3-pro", "high", None, {"thinkingLevel": "high", "includeThoughts": True}),
        ("gemini-3-flash", "minimal", None, {"thinkingLevel": "minimal", "includeThoughts": True}),
        ("models/gemini-3-flash", "medium", None, {"thinkingLevel": "medium", "includeThoughts": True}),
    ],
)
def test_reasoning_effort_is_gemini_thinking_inside_the_models_range(upstream, effort, limit, thinking):
    config = gemini({"reasoning_effort": effort}, upstream, limit)
    assert config == {"thinkingConfig": thinking}  # no maxOutputTokens the client did not ask for


def test_a_clients_output_limit_grows_by_the_budget_only():
    assert gemini({"reasoning_effort": "low", "max_tokens": 100}) == {
        "maxOutputTokens": 100 + 1024,
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
    }
    assert gemini({"reasoning_effort": "none", "max_tokens": 100})["maxOutputTokens"] == 100
    assert gemini({"reasoning_effort": "low", "max_tokens": 100}, "gemini-3-pro")["maxOutputTokens"] == 100
    assert gemini({"max_tokens": 100}) == {"maxOutputTokens": 100}


@pytest.mark.parametrize(
    ("upstream", "effort", "words"),
    [
        ("gemini-2.5-flash", "extreme", "reasoning_effort must be none or one of minimal, low, medium, high."),
        (
            "gemini-1.5-pro",
            "low",
            "model gem does not support 'reasoning_effort'; the gateway knows the thinking range of gemini-2.5 "
            "and gemini-3 models only; remove reasoning_effort.",
        ),
        ("gemini-2.5-pro", "none", "model gem does not support 'reasoning_effort none'; this model always thinks"),
        ("gemini-3-flash", "none", "model gem does not support 'reasoning_effort none'; this model always thinks"),
    ],
)
def test_reasoning_the_model_cannot_take_is_refused_by_name(upstream, effort, words):
    error = refusal(gemini, {"reasoning_effort": effort}, upstream)
    assert error.param == "reasoning_effort" and words in error.message


async def test_an_event_that_is_not_an_object_is_skipped_and_the_rest_of_the_chunk_still_relayed():
    frames = await frames_of(b"data: [1]\n\n", delta(0, type="text_delta", text="on"), stop("end_turn"), END)
    assert [f["choices"][0]["delta"].get("content") for f in frames[:-1]] == ["on", None] and frames[-1] == "DONE"


def test_an_annotation_first_drops_only_itself_and_references_are_rewritten_at_any_depth():
    assert gemini_schema({"$comment": "c", "type": "string", "default": "", "title": "t"}) == {
        "type": "string",
        "title": "t",
    }
    schema = {"definitions": {"I": {}}, "anyOf": [{"$ref": "#/definitions/I"}], "items": {"$ref": "#/definitions/I"}}
    converted = gemini_schema(schema)
    assert converted["anyOf"] == [{"$ref": "#/$defs/I"}] and converted["items"] == {"$ref": "#/$defs/I"}
