"""What an Anthropic Messages client sees of its request's translation and of the answer, field by field.

Found by mutation testing routing.upstream.translate.messages_to_chat and
routing.upstream.translate.messages_passthrough (docs/testing.md): each test pins a behaviour the
earlier tests let change unnoticed: a refusal's wording and param, a hint dropped or a field refused,
the reasoning effort's bounds, the usage classes, an event of the stream and its fields.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.stream import SAMPLE_BYTES
from routing.upstream.translate import messages_passthrough as passthrough
from routing.upstream.translate.messages_to_chat import (
    Gaps,
    MessagesStream,
    chat_request,
    chat_tool_choice,
    chat_tools,
    message_of,
    message_usage,
    reasoning_effort_of,
)

PNG = "iVBORw0KGgo="
SCHEMA = {"type": "object", "properties": {}}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def refusal(body: dict[str, Any]) -> tuple[int, str, str | None, str]:
    with pytest.raises(GatewayError) as info:
        chat_request(body)
    return info.value.status, info.value.message, info.value.param, info.value.code


def gaps_of(body: dict[str, Any]) -> tuple[dict[str, Any], Gaps]:
    gaps = Gaps()
    return chat_request(body, gaps), gaps


# --- the request: refusals -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"messages": {}}, "messages must be a list of message objects", "messages"),
        ({"messages": ["hi"]}, "messages[0] must be an object with role and content", "messages[0]"),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].role must be 'user', 'assistant' or 'system'",
            "messages[0].role",
        ),
        (
            {"messages": [{"role": "user", "content": 5}]},
            "messages[0].content must be a string or a list of content blocks",
            "messages[0].content",
        ),
        (
            {"messages": [user("text")]},
            "messages[0].content[0] must be a content block object",
            "messages[0].content[0]",
        ),
        (
            {"messages": [user({"type": 1})]},
            "messages[0].content[0].type must be a string: text, image, tool_use, tool_result or thinking",
            "messages[0].content[0].type",
        ),
        (
            {"messages": [user({"type": "text", "text": 5})]},
            "messages[0].content[0].text must be a string",
            "messages[0].content[0].text",
        ),
        (
            {"messages": [user({"type": "image", "source": "x"})]},
            "messages[0].content[0].source must be an object",
            "messages[0].content[0].source",
        ),
        (
            {"messages": [assistant({"type": "tool_use", "name": "f", "input": {}})]},
            "messages[0].content[0].id must be a string",
            "messages[0].content[0].id",
        ),
        (
            {"messages": [assistant({"type": "tool_use", "id": "t", "input": {}})]},
            "messages[0].content[0].name must be a string",
            "messages[0].content[0].name",
        ),
        (
            {"messages": [assistant({"type": "tool_use", "id": "t", "name": "f", "input": []})]},
            "messages[0].content[0].input must be an object",
            "messages[0].content[0].input",
        ),
        (
            {"messages": [user({"type": "tool_result", "content": "x"})]},
            "messages[0].content[0].tool_use_id must be a string",
            "messages[0].content[0].tool_use_id",
        ),
        (
            {"messages": [user({"type": "tool_result", "tool_use_id": "t", "content": 5})]},
            "messages[0].content[0].content must be a string or a list of text blocks",
            "messages[0].content[0].content",
        ),
        (
            {"messages": [user({"type": "tool_result", "tool_use_id": "t", "content": ["x"]})]},
            "messages[0].content[0].content[0] must be a content block object",
            "messages[0].content[0].content[0]",
        ),
        (
            {"messages": [user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "doc"}]})]},
            "messages[0].content[0].content[0].type must be text",
            "messages[0].content[0].content[0].type",
        ),
        (
            {"messages": [user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text"}]})]},
            "messages[0].content[0].content[0].text must be a string",
            "messages[0].content[0].content[0].text",
        ),
        ({"system": 5, "messages": []}, "system must be a string or a list of text blocks", "system"),
        ({"messages": [], "tools": {"a": 1}}, "tools must be a list of tool objects", "tools"),
        ({"messages": [], "tools": ["t"]}, "tools[0] must be an object", "tools[0]"),
        ({"messages": [], "tools": [{"input_schema": SCHEMA}]}, "tools[0].name must be a string", "tools[0].name"),
        (
            {"messages": [], "tools": [{"name": "f", "input_schema": SCHEMA, "description": 5}]},
            "tools[0].description must be a string",
            "tools[0].description",
        ),
        ({"messages": [], "tool_choice": "auto"}, "tool_choice must be an object with a type", "tool_choice"),
        (
            {"messages": [], "tool_choice": {"type": "some"}},
            "tool_choice.type must be auto, any, tool or none",
            "tool_choice.type",
        ),
        ({"messages": [], "tool_choice": {"type": "tool"}}, "tool_choice.name must be a string", "tool_choice.name"),
        ({"messages": [], "thinking": "on"}, "thinking must be an object", "thinking"),
        (
            {"messages": [], "thinking": {"type": "enabled", "budget_tokens": 0}},
            "thinking.budget_tokens must be a positive integer",
            "thinking.budget_tokens",
        ),
        (
            {"messages": [], "thinking": {"type": "enabled", "budget_tokens": True}},
            "thinking.budget_tokens must be a positive integer",
            "thinking.budget_tokens",
        ),
        ({"messages": [], "output_config": "json"}, "output_config must be an object", "output_config"),
        ({"messages": [], "stop_sequences": [5]}, "stop_sequences[0] must be a string", "stop_sequences[0]"),
        (
            {"messages": [], "stop_sequences": ["a", 5]},
            "stop_sequences[1] must be a string",
            "stop_sequences[1]",
        ),
        ({"messages": [], "metadata": {"user_id": 5}}, "metadata.user_id must be a string", "metadata.user_id"),
        # what the chat shape has no place for: the first such field, named
        (
            {"messages": [user({"type": "document", "source": {}})]},
            "messages[0].content[0].type: a 'document' block in a user turn cannot be translated to the chat shape",
            "messages[0].content[0].type",
        ),
        (
            {"messages": [], "mcp_servers": [{}], "container": "c"},
            "mcp_servers: this field cannot be translated to the chat shape",
            "mcp_servers",
        ),
        (
            {"messages": [], "tools": [{"type": "bash_20250124", "name": "bash"}]},
            "tools[0].input_schema: the server tool 'bash_20250124' cannot be translated to the chat shape",
            "tools[0].input_schema",
        ),
        (
            {"messages": [], "thinking": {"type": "sometimes"}},
            "thinking.type: the thinking type 'sometimes' cannot be translated to the chat shape",
            "thinking.type",
        ),
        (
            {"messages": [], "output_config": {"verbosity": "low"}},
            "output_config.verbosity: this output setting cannot be translated to the chat shape",
            "output_config.verbosity",
        ),
        (
            {"messages": [user({"type": "image", "source": {"type": "file", "file_id": "f"}})]},
            "messages[0].content[0].source: an image source other than base64 or url "
            "cannot be translated to the chat shape",
            "messages[0].content[0].source",
        ),
    ],
)
def test_a_malformed_or_untranslatable_request_is_a_400_saying_what_and_where(body, message, param):
    assert refusal(body) == (400, message, param, "invalid_request")


def test_an_image_in_an_assistant_turn_is_refused_naming_the_turn():
    body = {"messages": [assistant({"type": "image", "source": {"type": "base64", "data": PNG}})]}
    _, gaps = gaps_of(body)
    assert gaps.refused == [("messages[0].content[0].type", "a 'image' block in a assistant turn")]


# --- the request: what each field becomes ----------------------------------------------


def test_every_mapped_field_reaches_the_chat_body():
    body = {
        "model": "claude-x",
        "max_tokens": 100,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 7,
        "stop_sequences": ["END", "STOP"],
        "metadata": {"user_id": "u-1"},
        "system": "Be brief.",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert chat_request(body) == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "model": "claude-x",
        "max_tokens": 100,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 7,
        "stop": ["END", "STOP"],
        "user": "u-1",
        "stream": True,
    }


def test_absent_or_null_fields_add_nothing():
    body = {
        "model": None,
        "max_tokens": None,
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "stop_sequences": [],
        "metadata": {"user_id": None},
        "system": "",
        "stream": False,
        "tools": [],
        "tool_choice": None,
        "thinking": None,
        "output_config": None,
        "mcp_servers": None,
        "messages": [],
    }
    out, gaps = gaps_of(body)
    assert out == {"messages": []}
    assert (gaps.dropped, gaps.refused, gaps.reasoning) == ([], [], ())
    assert chat_request({"messages": [], "stream": "yes", "metadata": "u"}) == {"messages": []}


def test_zero_values_are_still_sent():
    out = chat_request({"messages": [], "max_tokens": 0, "temperature": 0, "top_p": 0, "top_k": 0})
    assert out == {"messages": [], "max_tokens": 0, "temperature": 0, "top_p": 0, "top_k": 0}


def test_system_blocks_are_joined_by_newlines_and_cache_control_is_a_dropped_hint():
    body = {
        "system": [
            {"type": "text", "text": "One."},
            {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [],
    }
    out, gaps = gaps_of(body)
    assert out["messages"] == [{"role": "system", "content": "One.\nTwo."}]
    assert gaps.dropped == ["cache_control"] and gaps.refused == []


def test_a_system_turn_becomes_a_system_message_in_place():
    body = {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "system", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
            {"role": "system", "content": None},
            {"role": "assistant", "content": "b"},
        ]
    }
    assert chat_request(body)["messages"] == [
        {"role": "user", "content": "a"},
        {"role": "system", "content": "x\ny"},
        {"role": "system", "content": ""},
        {"role": "assistant", "content": "b"},
    ]


def test_a_user_turn_of_blocks_keeps_text_images_and_tool_results_in_order():
    body = {
        "messages": [
            assistant(
                {"type": "text", "text": "Let "},
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "me."},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "g"},
            ),
            user(
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "two"},
                        {"type": "image", "source": {"type": "base64", "data": PNG}},
                        {"type": "text", "text": "three"},
                    ],
                },
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ),
            user({"type": "text", "text": "only"}),
            user({"type": "tool_result", "tool_use_id": "toolu_3"}),
            assistant({"type": "redacted_thinking", "data": "x"}),
        ]
    }
    out, gaps = gaps_of(body)
    assert out["messages"] == [
        {
            "role": "assistant",
            "content": "Let me.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "one"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "two\nthree"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
        {"role": "user", "content": "only"},
        {"role": "tool", "tool_call_id": "toolu_3", "content": ""},
        {"role": "assistant", "content": None},
    ]
    assert gaps.dropped == ["thinking", "tool_result.is_error"] and gaps.refused == []


def test_a_turn_of_one_image_is_a_list_and_an_empty_turn_is_nothing():
    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    out = chat_request({"messages": [user(image), user(), {"role": "assistant", "content": []}]})
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
        {"role": "assistant", "content": None},
    ]


def test_a_turn_of_only_untranslatable_blocks_is_still_a_turn_on_the_way_to_the_refusal():
    body = {"messages": [user({"type": "document", "source": {}}), user({"type": "thinking"})]}
    out, gaps = gaps_of(body)
    assert out["messages"] == [{"role": "user", "content": ""}]
    assert gaps.refused == [("messages[0].content[0].type", "a 'document' block in a user turn")]
    assert gaps.dropped == ["thinking"]


def test_cache_control_on_any_block_or_tool_is_dropped_once():
    cc = {"type": "ephemeral"}
    body = {
        "messages": [
            user(
                {"type": "text", "text": "a", "cache_control": cc},
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": "r", "cache_control": cc}],
                },
            )
        ],
        "tools": [{"name": "f", "input_schema": SCHEMA, "cache_control": cc}],
        "cache_control": cc,
        "context_management": {"edits": []},
        "service_tier": "auto",
    }
    out, gaps = gaps_of(body)
    assert gaps.dropped == ["cache_control", "context_management", "service_tier"]
    assert gaps.refused == []
    assert out["tools"] == [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
    for where in ("tool", "result"):
        one = {
            "messages": [user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r"}]})],
            "tools": [{"name": "f", "input_schema": SCHEMA}],
        }
        if where == "tool":
            one["tools"][0]["cache_control"] = cc
        else:
            one["messages"][0]["content"][0]["content"][0]["cache_control"] = cc
        assert gaps_of(one)[1].dropped == ["cache_control"]


def test_tools_keep_name_schema_and_description_and_a_server_tool_is_refused_not_sent():
    tools = [
        {"name": "f", "description": "Find it", "input_schema": SCHEMA},
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "g", "input_schema": {"type": "object"}, "description": None},
    ]
    gaps = Gaps()
    assert chat_tools(tools, gaps) == [
        {"type": "function", "function": {"name": "f", "parameters": SCHEMA, "description": "Find it"}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}},
    ]
    assert gaps.refused == [("tools[1].input_schema", "the server tool 'web_search_20250305'")]
    out, gaps = gaps_of({"messages": [], "tools": [tools[1]]})
    assert "tools" not in out and gaps.refused == [("tools[0].input_schema", "the server tool 'web_search_20250305'")]
    assert chat_tools([{"type": "bash_20250124", "name": "bash"}, {"name": "h", "input_schema": SCHEMA}]) == [
        {"type": "function", "function": {"name": "h", "parameters": SCHEMA}}
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ("auto", True)),
        ({"type": "any"}, ("required", True)),
        ({"type": "none"}, ("none", True)),
        ({"type": "auto", "disable_parallel_tool_use": False}, ("auto", True)),
        ({"type": "auto", "disable_parallel_tool_use": "yes"}, ("auto", True)),
        ({"type": "auto", "disable_parallel_tool_use": True}, ("auto", False)),
        ({"type": "any", "disable_parallel_tool_use": True}, ("required", False)),
        ({"type": "none", "disable_parallel_tool_use": True}, ("none", False)),
        (
            {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
            ({"type": "function", "function": {"name": "f"}}, False),
        ),
        ({"type": "tool", "name": "f"}, ({"type": "function", "function": {"name": "f"}}, True)),
    ],
)
def test_each_tool_choice_and_its_parallel_switch(choice, expected):
    assert chat_tool_choice(choice) == expected
    out = chat_request({"messages": [], "tool_choice": choice})
    assert out["tool_choice"] == expected[0]
    assert out.get("parallel_tool_calls", True) is expected[1]


@pytest.mark.parametrize(
    ("budget", "effort"),
    [(1, "low"), (4095, "low"), (4096, "medium"), (10000, "medium"), (16383, "medium"), (16384, "high")],
)
def test_a_thinking_budget_becomes_an_effort_at_its_bounds(budget, effort):
    assert reasoning_effort_of({"type": "enabled", "budget_tokens": budget}) == effort
    out, gaps = gaps_of({"messages": [], "thinking": {"type": "enabled", "budget_tokens": budget}})
    assert out == {"messages": [], "reasoning_effort": effort}
    assert (gaps.reasoning, gaps.dropped, gaps.refused) == (("thinking",), [], [])


@pytest.mark.parametrize(
    ("effort", "expected"), [("low", "low"), ("medium", "medium"), ("high", "high"), ("max", "high")]
)
def test_adaptive_thinking_takes_the_output_configs_effort(effort, expected):
    body = {"messages": [], "thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}
    out, gaps = gaps_of(body)
    assert out == {"messages": [], "reasoning_effort": expected}
    assert (gaps.reasoning, gaps.dropped, gaps.refused) == (("thinking", "output_config.effort"), [], [])


def test_thinking_that_asks_for_nothing_sends_no_effort():
    for body in (
        {"messages": [], "thinking": {"type": "adaptive"}},
        {"messages": [], "thinking": {"type": "adaptive"}, "output_config": {"effort": 3}},
        {"messages": [], "thinking": {"type": "adaptive"}, "output_config": {"effort": "extreme"}},
        {"messages": [], "thinking": {"type": "adaptive"}, "output_config": {"effort": ["high"]}},
        {"messages": [], "thinking": {"type": "disabled"}},
    ):
        out, gaps = gaps_of(body)
        assert "reasoning_effort" not in out and gaps.reasoning == () and gaps.refused == []
    assert reasoning_effort_of({"type": "adaptive"}) is None
    assert reasoning_effort_of({"type": "disabled"}, "high") is None
    # the effort without adaptive thinking is a hint the chat shape goes without
    out, gaps = gaps_of({"messages": [], "thinking": {"type": "disabled"}, "output_config": {"effort": "high"}})
    assert out == {"messages": []} and gaps.dropped == ["output_config.effort"]
    out, gaps = gaps_of({"messages": [], "output_config": {"effort": "high"}})
    assert out == {"messages": []} and gaps.dropped == ["output_config.effort"]
    out, gaps = gaps_of(
        {"messages": [], "thinking": {"type": "enabled", "budget_tokens": 5000}, "output_config": {"effort": "low"}}
    )
    assert out["reasoning_effort"] == "medium" and gaps.dropped == ["output_config.effort"]
    assert gaps.reasoning == ("thinking",)


def test_an_unknown_thinking_type_is_refused_with_its_own_name():
    _, gaps = gaps_of({"messages": [], "thinking": {"type": ["x"]}})
    assert gaps.refused == [("thinking.type", "the thinking type ['x']")]
    _, gaps = gaps_of({"messages": [], "thinking": {}})
    assert gaps.refused == [("thinking.type", "the thinking type None")]


def test_a_json_schema_output_format_is_chats_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = {"messages": [], "output_config": {"format": {"type": "json_schema", "schema": schema}, "task": None}}
    out, gaps = gaps_of(body)
    assert out["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert (gaps.dropped, gaps.refused) == ([], [])
    out = chat_request({"messages": [], "output_config": {"format": {"type": "json_schema"}}})
    assert out["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": {}}}
    _, gaps = gaps_of({"messages": [], "output_config": {"format": {"type": "text"}}})
    assert gaps.refused == [("output_config.format", "this output setting")]


def test_gaps_are_noted_in_request_order_and_the_refusal_names_the_first():
    body = {
        "messages": [user({"type": "search_result"})],
        "container": "c",
        "cache_control": {"type": "ephemeral"},
        "mcp_servers": [],
    }
    _, gaps = gaps_of(body)
    assert gaps.refused == [
        ("messages[0].content[0].type", "a 'search_result' block in a user turn"),
        ("container", "this field"),
        ("mcp_servers", "this field"),
    ]
    assert gaps.dropped == ["cache_control"]
    assert refusal(body)[2] == "messages[0].content[0].type"


# --- the answer: a chat.completion as a message ----------------------------------------


def completion(message: Any, finish: Any = "stop", usage: Any = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {"id": "chatcmpl-1", "model": "gpt-x", "choices": [choice], "usage": usage, **extra}


def test_a_full_answer_becomes_the_message_a_client_reads():
    message = {
        "role": "assistant",
        "reasoning_content": "I think.",
        "content": "Here.",
        "refusal": "But not that.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{oops"}},
        ],
    }
    usage = {"prompt_tokens": 30, "completion_tokens": 5}
    assert message_of(completion(message, "tool_calls", usage), "msg_fallback") == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "thinking", "thinking": "I think.", "signature": ""},
            {"type": "text", "text": "Here."},
            {"type": "text", "text": "But not that."},
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "call_2", "name": "g", "input": {"_raw": "{oops"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 5},
    }


def test_an_empty_or_odd_answer_is_still_a_message():
    empty = {
        "id": "msg_fallback",
        "type": "message",
        "role": "assistant",
        "model": "",
        "content": [],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    for data in (None, [], {}, {"choices": []}, {"choices": ["x"]}, {"choices": [{"message": "x"}]}):
        assert message_of(data, "msg_fallback") == empty
    assert message_of({})["id"] == ""
    parts = {"content": [{"type": "text", "text": "a"}, {"text": 5}, "x", {"type": "text", "text": "b"}, {"a": 1}]}
    assert message_of(completion(parts))["content"] == [{"type": "text", "text": "ab"}]
    blank = {"content": "", "refusal": "", "reasoning_content": "", "tool_calls": None}
    assert message_of(completion(blank))["content"] == []
    assert message_of(completion({"content": "x"}, "stop", stop_reason="END"))["stop_sequence"] is None
    answer = completion({"content": "x"}, "stop")
    answer["choices"][0]["stop_reason"] = "END"
    got = message_of(answer)
    assert (got["stop_reason"], got["stop_sequence"]) == ("stop_sequence", "END")


@pytest.mark.parametrize(
    ("call", "block"),
    [
        ("call", {"type": "tool_use", "id": "", "name": "", "input": {"_raw": ""}}),
        ({"id": "c", "function": "f"}, {"type": "tool_use", "id": "c", "name": "", "input": {"_raw": ""}}),
        (
            {"id": "c", "function": {"name": "f", "arguments": b"{x"}},
            {"type": "tool_use", "id": "c", "name": "f", "input": {"_raw": ""}},
        ),
        (
            {"id": 7, "function": {"name": "f", "arguments": "[1"}},
            {"type": "tool_use", "id": "7", "name": "f", "input": {"_raw": "[1"}},
        ),
        ({"function": {"arguments": "x"}}, {"type": "tool_use", "id": "", "name": "", "input": {"_raw": "x"}}),
    ],
)
def test_a_malformed_tool_call_of_the_model_is_kept_not_failed(call, block):
    assert message_of(completion({"tool_calls": [call]}))["content"] == [block]


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, {"input_tokens": 0, "output_tokens": 0}),
        ({"prompt_tokens": "3", "completion_tokens": 2.0}, {"input_tokens": 0, "output_tokens": 0}),
        (
            {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 10}},
            {"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 10},
        ),
        (
            {"prompt_tokens": 30, "completion_tokens": 5, "cache_creation_input_tokens": 8},
            {"input_tokens": 22, "output_tokens": 5, "cache_creation_input_tokens": 8},
        ),
        (
            {
                "prompt_tokens": 30,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 10},
                "cache_creation_input_tokens": 20,
            },
            {"input_tokens": 0, "output_tokens": 5, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 20},
        ),
        # more cached than the prompt: the counts do not add up, the prompt is kept whole
        (
            {"prompt_tokens": 30, "prompt_tokens_details": {"cached_tokens": 25}, "cache_creation_input_tokens": 6},
            {"input_tokens": 30, "output_tokens": 0},
        ),
        (
            {"prompt_tokens": 30, "prompt_tokens_details": {"cached_tokens": 0}, "cache_creation_input_tokens": -1},
            {"input_tokens": 30, "output_tokens": 0},
        ),
        (
            {"prompt_tokens": 30, "prompt_tokens_details": {"cached_tokens": True}, "cache_creation_input_tokens": 1.0},
            {"input_tokens": 30, "output_tokens": 0},
        ),
        (
            {"prompt_tokens": 30, "prompt_tokens_details": "10", "completion_tokens_details": [1]},
            {"input_tokens": 30, "output_tokens": 0},
        ),
        (
            {"prompt_tokens": 4, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}},
            {"input_tokens": 4, "output_tokens": 9, "output_tokens_details": {"thinking_tokens": 6}},
        ),
        (
            {"prompt_tokens": 4, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 0}},
            {"input_tokens": 4, "output_tokens": 9},
        ),
        (
            {"prompt_tokens": 3, "cache_creation_input_tokens": 1},
            {"input_tokens": 2, "output_tokens": 0, "cache_creation_input_tokens": 1},
        ),
        (
            {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1}},
            {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 1},
        ),
    ],
)
def test_chat_usage_becomes_anthropics_classes(usage, expected):
    assert message_usage(usage) == expected
    assert message_of(completion({"content": "x"}, usage=usage))["usage"] == expected


# --- the answer: a chunk stream as Anthropic's events -----------------------------------


def chunk(delta: Any, finish: Any = None, usage: Any = None, **top: Any) -> bytes:
    frame: dict[str, Any] = {"id": "chatcmpl-9", "model": "gpt-x", **top}
    frame["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        frame["usage"] = usage
    return b"data: " + orjson.dumps(frame) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.split(b"\n\n"):
        if frame:
            name, data = frame.split(b"\n", 1)
            assert name.startswith(b"event: ") and data.startswith(b"data: ")
            out.append((name[7:].decode(), orjson.loads(data[6:])))
    return out


def test_reasoning_text_and_refusal_stream_as_their_blocks_with_the_upstreams_usage():
    writer = MessagesStream("msg_1", input_tokens=12)
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    raw = writer.feed(
        chunk({"role": "assistant", "reasoning_content": "Let "}, id="")
        + chunk({"reasoning": "me."})
        + chunk({"content": "Hi", "refusal": "no"})
        + chunk({"content": ""}, "length")
        + chunk(None, usage=usage)
        + DONE
    )
    assert events(raw) == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "gpt-x",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 12, "output_tokens": 0},
                },
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let "}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "me."}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "no"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 9,
                    "cache_read_input_tokens": 30,
                    "output_tokens_details": {"thinking_tokens": 3},
                },
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    assert (writer.prompt_tokens, writer.completion_tokens, writer.final) == (40, 9, True)
    assert writer.classes == {"cache_read": 30, "reasoning": 3}
    assert writer.feed(chunk({"content": "late"}) + DONE) == b"" and writer.flush() == b""


def test_a_stream_without_usage_ends_with_zero_output_tokens_and_an_estimate():
    writer = MessagesStream()
    raw = writer.feed(chunk({"content": "abcdefghi"}) + chunk({"content": "j"}) + chunk({}, "stop") + DONE)
    got = events(raw)
    assert got[0][1]["message"]["id"] == "chatcmpl-9"
    assert got[0][1]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert got[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 0},
    }
    assert (writer.prompt_tokens, writer.completion_tokens, writer.classes, writer.final) == (None, None, None, False)
    assert writer.estimated_completion_tokens() == 3  # 10 characters, 2 frames


def test_the_estimate_counts_thinking_and_tool_arguments_too():
    writer = MessagesStream()
    writer.feed(
        chunk({"reasoning_content": "abcdefgh"})
        + chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "1234567890123"}}]})
    )
    assert writer.estimated_completion_tokens() == 6  # 21 characters
    assert MessagesStream().estimated_completion_tokens() == 0


def test_tool_calls_each_open_their_block_even_without_id_name_or_arguments():
    writer = MessagesStream()
    raw = writer.feed(
        chunk({"tool_calls": ["x", {"function": {"name": "first"}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]})
        + chunk({"tool_calls": [{"index": 3, "id": "call_3", "function": {"name": "g", "arguments": "{}"}}]})
        + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
        + chunk({}, "tool_calls")
        + DONE
    )
    got = events(raw)[2:]
    assert got == [
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_0", "name": "first", "input": {}},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "call_3", "name": "g", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 0},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_only_the_first_choice_and_json_objects_are_read():
    writer = MessagesStream()
    other = b'data: {"choices": [{"index": 1, "delta": {"content": "B"}}, "x"]}\n\n'
    raw = writer.feed(
        b"data: not json\n\n"
        + b"data: [1, 2]\n\n"
        + other
        + chunk({"content": "A"})
        + b'data: {"choices": [{"delta": "x", "finish_reason": ""}]}\n\n'
        + DONE
    )
    got = events(raw)
    assert [name for name, _ in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0][1]["message"]["model"] == "" and got[0][1]["message"]["id"] == ""
    assert got[3][1]["delta"]["text"] == "A" and got[5][1]["delta"]["stop_reason"] == "end_turn"


def test_a_usage_frame_without_a_prompt_count_is_not_the_final_usage():
    writer = MessagesStream()
    raw = writer.feed(chunk({"content": "x"}) + chunk(None, usage={"completion_tokens": 4}) + DONE)
    assert events(raw)[-2][1]["usage"] == {"output_tokens": 0} and not writer.final
    writer = MessagesStream()
    raw = writer.feed(
        chunk({"content": "x"}) + chunk(None, usage={"prompt_tokens": 5, "completion_tokens": "4"}) + DONE
    )
    assert events(raw)[-2][1]["usage"] == {"input_tokens": 5, "output_tokens": 0}
    assert (writer.prompt_tokens, writer.completion_tokens, writer.classes) == (5, None, None)


def test_done_before_any_frame_still_starts_and_ends_the_message():
    writer = MessagesStream("msg_7", input_tokens=3)
    got = events(writer.feed(DONE))
    assert [name for name, _ in got] == ["message_start", "ping", "message_delta", "message_stop"]
    assert got[0][1]["message"]["id"] == "msg_7" and got[0][1]["message"]["usage"]["input_tokens"] == 3
    assert got[2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        (
            b'data: {"error": {"message": "slow down", "type": "rate_limit_error"}}\n\n',
            {"type": "rate_limit_error", "message": "slow down"},
        ),
        (
            b'data: {"error": {"type": "server_error"}}\n\n',
            {"type": "api_error", "message": "the upstream stream failed; retry the request"},
        ),
        (b'data: {"error": "boom"}\n\n', {"type": "api_error", "message": "boom"}),
    ],
)
def test_an_error_frame_is_one_error_event_and_the_end(frame, error):
    writer = MessagesStream()
    raw = writer.feed(chunk({"content": "x"}) + frame + chunk({"content": "late"}) + DONE)
    assert events(raw)[-1] == ("error", {"type": "error", "error": error})
    assert "message_stop" not in [name for name, _ in events(raw)]
    assert writer.flush() == b""


def test_a_cut_stream_ends_with_an_api_error_event_once():
    writer = MessagesStream()
    writer.feed(chunk({"content": "x"}))
    assert events(writer.flush()) == [
        (
            "error",
            {
                "type": "error",
                "error": {"type": "api_error", "message": "the upstream stream ended unexpectedly; retry the request"},
            },
        )
    ]
    assert writer.flush() == b"" and writer.feed(DONE) == b""


# --- the pass-through: an Anthropic upstream's events, relayed -------------------------


def anthropic_event(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def block_start(block: Any) -> bytes:
    return anthropic_event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})


def text_delta(text: str) -> bytes:
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    return anthropic_event("content_block_delta", delta)


START = anthropic_event(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "m",
            "usage": {"input_tokens": 9, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2},
        },
    },
)
STOP = anthropic_event("message_stop", {"type": "message_stop"})


async def held_chunks(data: bytes) -> list[bytes]:
    async def one() -> Any:
        yield data

    return [bytes(c) for c in await _collect(passthrough.held_until_content(one()))]


async def _collect(chunks: Any) -> list[bytes]:
    return [c async for c in chunks]


@pytest.mark.parametrize(
    ("first", "commits"),
    [
        (block_start({"type": "text", "text": ""}), False),
        (block_start({"type": "thinking", "thinking": ""}), False),
        (block_start({}), False),
        (anthropic_event("content_block_start", {"type": "content_block_start", "index": 0}), False),
        (anthropic_event("content_block_start", [1]), True),
        (b"event: content_block_start\ndata: {oops\n\n", True),
        (b"event: content_block_start\n\n", False),
        (block_start({"type": "text", "text": "Hi"}), True),
        (block_start({"type": "tool_use", "id": "t", "name": "f", "input": {}}), True),
        (text_delta("x"), True),
        (anthropic_event("message_delta", {"type": "message_delta", "delta": {}}), True),
        (anthropic_event("ping", {"type": "ping"}), False),
    ],
)
async def test_what_commits_a_relayed_stream(first, commits):
    out = await held_chunks(START + first)
    assert out == ([START + first] if commits else [])
    assert passthrough._carries_content(b"message_stop", None) is True


async def test_a_stream_that_ends_at_once_is_relayed_whole_with_its_end_marker():
    out = await held_chunks(START + STOP)
    assert out == [START + STOP + b"data: [DONE]\n\n"]


def test_the_relay_reads_the_cache_classes_of_message_start_and_the_final_count_of_message_delta():
    relay = passthrough.AnthropicRelay()
    assert (relay.prompt_tokens, relay.completion_tokens, relay.classes, relay.final) == (None, None, None, False)
    relay.feed(START)
    assert (relay.prompt_tokens, relay.completion_tokens, relay.final) == (15, None, False)
    assert relay.classes == {"cache_read": 4, "cache_write": 2}
    start_out = anthropic_event("message_start", {"message": {"usage": {"input_tokens": 9, "output_tokens": 1}}})
    relay = passthrough.AnthropicRelay()
    relay.feed(start_out)
    assert (relay.prompt_tokens, relay.completion_tokens, relay.final) == (9, 1, False)
    end = anthropic_event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 7}})
    assert relay.feed(end) == end
    assert (relay.prompt_tokens, relay.completion_tokens, relay.final) == (9, 7, True)
    # a later message_start (or one without counts) does not undo the final count
    relay.feed(anthropic_event("message_start", {"message": {"usage": {"output_tokens": 1}}}))
    assert (relay.completion_tokens, relay.final) == (1, True)


@pytest.mark.parametrize(
    "frame",
    [
        b"event: message_start\ndata: {oops\n\n",
        anthropic_event("message_start", [1]),
        anthropic_event("message_start", {"message": None}),
        anthropic_event("message_start", {"message": {"usage": "9"}}),
        anthropic_event("message_delta", {"usage": None}),
        anthropic_event("message_delta", {"usage": {"output_tokens": "3"}}),
        b"event: message_delta\n\n",
    ],
)
def test_an_unreadable_usage_event_is_relayed_and_counts_nothing(frame):
    relay = passthrough.AnthropicRelay()
    assert relay.feed(frame) == frame
    assert (relay.prompt_tokens, relay.completion_tokens, relay.classes, relay.final) == (None, None, None, False)


@pytest.mark.parametrize(
    ("terminal", "message"),
    [
        (b'data: {"error": {"message": "it broke"}}\n\n', "it broke"),
        (b'data: {"error": {"message": ""}}\n\n', "the upstream stream failed; retry the request"),
        (b'data: {"error": "it broke"}\n\n', "the upstream stream failed; retry the request"),
        (b'data: {"error": oops}\n\n', "the upstream stream failed; retry the request"),
    ],
)
def test_the_gateways_terminal_frame_is_one_api_error_event(terminal, message):
    relay = passthrough.AnthropicRelay()
    error = anthropic_event("error", {"type": "error", "error": {"type": "api_error", "message": message}})
    assert relay.feed(START + terminal + terminal) == START + error
    assert relay.flush() == b""


def test_after_the_upstreams_own_error_event_the_terminal_frame_is_dropped():
    relay = passthrough.AnthropicRelay()
    own = anthropic_event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    assert relay.feed(START + own + b'data: {"error": {"message": "x"}}\n\n') == START + own


def test_the_estimate_of_a_cut_stream_counts_every_delta_kind():
    relay = passthrough.AnthropicRelay()
    deltas = [
        {"type": "text_delta", "text": "abcdefgh" * 4},
        {"type": "input_json_delta", "partial_json": "1234" * 4},
        {"type": "thinking_delta", "thinking": "wxyz" * 4},
        {"type": "signature_delta", "signature": "s" * 400},
        "x",
    ]
    raw = b"".join(anthropic_event("content_block_delta", {"index": 0, "delta": d}) for d in deltas)
    relay.feed(START + b"event: content_block_delta\ndata: {oops\n\n" + raw + b"event: content_block_delta\n\n")
    assert relay.estimated_completion_tokens() == 16  # 64 characters in 6 frames (one unreadable)
    relay = passthrough.AnthropicRelay()
    relay.feed(text_delta("a" * 40))
    assert relay.estimated_completion_tokens() == 10
    assert passthrough.AnthropicRelay().estimated_completion_tokens() == 0


def test_the_estimate_scales_its_sample_to_every_delta_relayed():
    relay = passthrough.AnthropicRelay()
    big = text_delta("a" * 4000)
    one = len(big.split(b"\ndata: ", 1)[1]) - 2
    count = SAMPLE_BYTES // one + 3
    relay.feed(big * count)
    sampled = -(-SAMPLE_BYTES // one)
    assert relay.estimated_completion_tokens() == (4000 * sampled) * count // sampled // 4


def test_a_choice_without_an_index_is_the_first():
    writer = MessagesStream()
    raw = writer.feed(b'data: {"choices": [{"delta": {"content": "A"}, "finish_reason": "length"}]}\n\n' + DONE)
    got = events(raw)
    assert got[3][1]["delta"] == {"type": "text_delta", "text": "A"}
    assert got[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_the_estimate_is_at_least_one_token_a_frame_and_a_token_for_four_characters():
    writer = MessagesStream()
    writer.feed(b"".join(chunk({"content": "a"}) for _ in range(5)))
    assert writer.estimated_completion_tokens() == 5
    writer = MessagesStream()
    writer.feed(chunk({"content": "abcdefgh"}))
    assert writer.estimated_completion_tokens() == 2


# the data of a text delta event without its text
DELTA_BASE = len(orjson.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}))


def sized_delta(size: int, fill: str = "a") -> bytes:
    """A text delta event whose data is `size` bytes (`size - DELTA_BASE` characters of text)."""
    event = text_delta(fill * (size - DELTA_BASE))
    assert len(event.split(b"\ndata: ", 1)[1]) - 2 == size
    return event


@pytest.mark.parametrize(
    ("first", "sampled"),
    [
        (SAMPLE_BYTES - 1, 2),  # one byte short of the sample: the next delta is sampled too
        (SAMPLE_BYTES, 1),  # the sample is full: the rest is extrapolated from it
    ],
)
def test_a_cut_streams_estimate_extrapolates_from_its_first_64_kib(first, sampled):
    sizes = [first, 1000, 3000, 300]
    relay = passthrough.AnthropicRelay()
    relay.feed(b"".join(sized_delta(size) for size in sizes))
    chars = sum(size - DELTA_BASE for size in sizes[:sampled]) * len(sizes) // sampled
    got = relay.estimated_completion_tokens()
    assert type(got) is int and got == -(-chars // 4)


def test_an_unnamed_frame_that_is_not_an_error_is_relayed_as_sent():
    relay = passthrough.AnthropicRelay()
    frame = b'data: {"type": "ping"}\n\n'
    assert relay.feed(frame + STOP) == frame + STOP


def test_a_system_turns_blocks_are_read_like_the_system_prompts():
    cc = {"type": "ephemeral"}
    body = {"messages": [{"role": "system", "content": [{"type": "text", "text": "x", "cache_control": cc}]}]}
    out, gaps = gaps_of(body)
    assert out["messages"] == [{"role": "system", "content": "x"}] and gaps.dropped == ["cache_control"]
    bad = {"messages": [{"role": "system", "content": [{"type": "text", "text": 5}]}]}
    assert refusal(bad)[1:3] == ("messages[0].content[0].text must be a string", "messages[0].content[0].text")


def test_cache_control_on_a_message_block_alone_is_a_dropped_hint():
    for block in (
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}, "cache_control": {}},
    ):
        out, gaps = gaps_of({"messages": [user(block)]})
        assert gaps.dropped == ["cache_control"] and gaps.refused == []
        assert "cache_control" not in orjson.dumps(out).decode()
