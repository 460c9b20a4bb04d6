"""Anthropic Messages <-> OpenAI chat translation, both directions (docs/anthropic-messages.md).

Pure functions and the stream writer, no network: an Anthropic client's request in the
internal chat shape, a chat answer / chunk stream as Anthropic's message / events, and
the round trip back to an Anthropic upstream.
"""

from __future__ import annotations

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.translate.chat_to_anthropic import anthropic_request, chat_completion_of
from routing.upstream.translate.messages_passthrough import AnthropicRelay, held_until_content
from routing.upstream.translate.messages_to_chat import MessagesStream, chat_request, message_of
from routing.upstream.translate.shared import error_type

PNG = "iVBORw0KGgo="
TOOL = {"name": "lookup", "description": "Look it up", "input_schema": {"type": "object", "properties": {}}}
CONVERSATION = {
    "model": "claude",
    "max_tokens": 50,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "png"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a logo"}]},
                {"type": "text", "text": "And?"},
            ],
        },
    ],
    "tools": [TOOL],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "stop_sequences": ["END"],
    "temperature": 0.3,
    "top_k": 5,
    "metadata": {"user_id": "u-1"},
    "stream": True,
}


def test_an_anthropic_request_becomes_the_chat_shape():
    assert chat_request(CONVERSATION) == {
        "model": "claude",
        "max_tokens": 50,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"png"}'}}
                ],
            },
            # the tool result must follow the assistant's call; the user's text comes after it
            {"role": "tool", "tool_call_id": "toolu_1", "content": "a logo"},
            {"role": "user", "content": "And?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "lookup", "parameters": TOOL["input_schema"], "description": "Look it up"},
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "stop": ["END"],
        "temperature": 0.3,
        "top_k": 5,
        "user": "u-1",
        "stream": True,
    }


def test_the_round_trip_to_an_anthropic_upstream_keeps_what_it_can():
    back = anthropic_request(chat_request(CONVERSATION), "claude-up", stream=True)
    assert back["system"] == "Be brief."
    assert back["messages"][0] == CONVERSATION["messages"][0]
    assert back["messages"][1]["content"] == CONVERSATION["messages"][1]["content"][1:]  # thinking dropped
    assert back["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a logo"},
        {"type": "text", "text": "And?"},
    ]
    assert back["tools"] == [TOOL]
    assert back["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert (back["stop_sequences"], back["top_k"], back["metadata"], back["stream"]) == (
        ["END"],
        5,
        {"user_id": "u-1"},
        True,
    )


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "lookup"}, {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_tool_choices_translate(choice, expected):
    body = chat_request({"messages": [], "tools": [TOOL], "tool_choice": choice})
    assert body["tool_choice"] == expected and "parallel_tool_calls" not in body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"messages": [{"role": "assistant", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": ["text"]}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "assistant", "content": [{"type": {"a": 5}}]}]}, "messages[0].content[0].type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
            "messages[0].content[0].source",
        ),
        ({"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].input_schema"),
    ],
)
def test_what_cannot_be_translated_is_a_400_naming_the_field(body, param):
    with pytest.raises(GatewayError) as info:
        chat_request(body)
    assert (info.value.status, info.value.param) == (400, param)


# --- answers ---------------------------------------------------------------------------


def completion(message: dict, finish: str, **choice_extra) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-x",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice_extra}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 10}},
    }


def test_a_chat_answer_with_a_tool_call_becomes_a_message():
    message = {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}],
    }
    assert message_of(completion(message, "tool_calls")) == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": 1}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 10},
    }


@pytest.mark.parametrize(
    ("finish", "extra", "stop"),
    [
        ("stop", {}, ("end_turn", None)),
        ("length", {}, ("max_tokens", None)),
        ("content_filter", {}, ("refusal", None)),
        ("stop", {"stop_reason": "END"}, ("stop_sequence", "END")),  # vLLM names the matched stop string
    ],
)
def test_finish_reasons_become_stop_reasons(finish, extra, stop):
    got = message_of(completion({"role": "assistant", "content": "x"}, finish, **extra))
    assert (got["stop_reason"], got["stop_sequence"]) == stop


def test_a_stop_sequence_survives_the_trip_through_the_chat_shape():
    upstream = {
        "id": "msg_1",
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": "stop_sequence",
        "stop_sequence": "END",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    chat, prompt, completion_tokens = chat_completion_of(upstream, "claude-up")
    assert chat["choices"][0]["finish_reason"] == "stop" and (prompt, completion_tokens) == (3, 1)
    back = message_of(orjson.loads(orjson.dumps(chat)))
    assert (back["stop_reason"], back["stop_sequence"]) == ("stop_sequence", "END")
    assert back["content"] == upstream["content"] and back["usage"] == {"input_tokens": 3, "output_tokens": 1}


def test_tool_arguments_that_are_not_json_do_not_fail_the_answer():
    message = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{bad"}}]}
    got = message_of(completion(message, "tool_calls"))
    assert got["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": {"_raw": "{bad"}}]


@pytest.mark.parametrize(
    ("status", "upstream", "expected"),
    [
        (400, None, "invalid_request_error"),
        (401, None, "authentication_error"),
        (403, None, "permission_error"),
        (404, None, "not_found_error"),
        (409, None, "invalid_request_error"),
        (413, None, "request_too_large"),
        (429, None, "rate_limit_error"),
        (500, None, "api_error"),
        (502, None, "api_error"),
        (503, None, "overloaded_error"),
        (504, None, "api_error"),
        (400, "server_error", "invalid_request_error"),  # an OpenAI type is not Anthropic's
        (500, "overloaded_error", "overloaded_error"),  # an Anthropic upstream's own type is kept
    ],
)
def test_error_types_follow_the_status(status, upstream, expected):
    assert error_type(status, upstream) == expected


# --- streams ---------------------------------------------------------------------------


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None, **extra) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]
    out = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "gpt-x", "choices": choices}
    if usage is not None:
        out["usage"] = usage
    return b"data: " + orjson.dumps(out) + b"\n\n"


TOOL_STREAM = (
    chunk({"role": "assistant", "content": ""})
    + chunk({"content": "Hi "})
    + chunk({"content": "there"})
    + chunk(
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}
    )
    + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]})
    + chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]})
    + chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}]})
    + chunk({}, "tool_calls")
    + chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 4})
    + b"data: [DONE]\n\n"
)


def parse_events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for frame in raw.split(b"\n\n"):
        if frame:
            name, data = frame.split(b"\n", 1)
            out.append((name[len(b"event: ") :].decode(), orjson.loads(data[len(b"data: ") :])))
    return out


def test_a_chunk_stream_becomes_anthropics_events():
    writer = MessagesStream()
    raw = writer.feed(TOOL_STREAM) + writer.flush()
    got = parse_events(raw)
    assert [(name, e.get("index")) for name, e in got] == [
        ("message_start", None),
        ("ping", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert got[0][1]["message"]["id"] == "chatcmpl-9" and got[0][1]["message"]["model"] == "gpt-x"
    assert got[6][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert [got[i][1]["delta"]["partial_json"] for i in (7, 8)] == ['{"a":', " 1}"]
    assert got[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 4, "input_tokens": 11},
    }
    assert (writer.prompt_tokens, writer.completion_tokens) == (11, 4)


def test_the_events_do_not_depend_on_chunk_boundaries():
    whole = MessagesStream().feed(TOOL_STREAM)
    for size in (1, 7, 64):
        writer = MessagesStream()
        data = TOOL_STREAM.replace(b"\n", b"\r\n") if size == 7 else TOOL_STREAM
        pieces = b"".join(writer.feed(data[i : i + size]) for i in range(0, len(data), size))
        assert pieces + writer.flush() == whole


def test_a_stop_sequence_reaches_message_delta():
    writer = MessagesStream()
    raw = writer.feed(chunk({"content": "x"}) + chunk({}, "stop", stop_reason="END") + b"data: [DONE]\n\n")
    delta = parse_events(raw)[-2][1]["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_an_error_frame_after_the_commit_ends_the_stream_with_one_error_event():
    writer = MessagesStream()
    terminal = b'data: {"error":{"message":"the upstream stream broke","type":"upstream_error","code":"upstream_stream_error"}}\n\n'
    raw = writer.feed(chunk({"content": "x"}) + terminal + chunk({"content": "late"})) + writer.flush()
    got = parse_events(raw)
    assert got[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "the upstream stream broke"}},
    )
    assert [name for name, _ in got].count("error") == 1 and "message_stop" not in [name for name, _ in got]


def test_a_stream_that_just_stops_ends_with_an_error_event():
    writer = MessagesStream()
    got = parse_events(writer.feed(chunk({"content": "x"})) + writer.flush())
    assert got[-1][0] == "error" and got[-1][1]["error"]["type"] == "api_error"


# --- passthrough framing ---------------------------------------------------------------


def anthropic_event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


START = anthropic_event(
    "message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 9}}}
)
TEXT_START = anthropic_event(
    "content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
PING_EVENT = anthropic_event("ping", {"type": "ping"})
DELTA = anthropic_event(
    "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}
)
STOP = anthropic_event("message_stop", {"type": "message_stop"})
OVERLOADED = anthropic_event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


async def held(data: bytes, size: int) -> list[bytes]:
    async def pieces():
        for i in range(0, len(data), size):
            yield data[i : i + size]

    return [c async for c in held_until_content(pieces())]


@pytest.mark.parametrize("size", [1, 9, 4096])
async def test_events_before_the_first_content_are_held_and_sent_with_it(size):
    out = await held(START + TEXT_START + PING_EVENT + DELTA + STOP, size)
    assert out[0].startswith(START + TEXT_START + PING_EVENT + DELTA)  # one piece: the commit sees content at once
    assert b"".join(out) == START + TEXT_START + PING_EVENT + DELTA + STOP + b"data: [DONE]\n\n"


async def test_an_error_event_before_content_is_a_pre_commit_failure():
    with pytest.raises(UpstreamFailure) as info:
        await held(START + PING_EVENT + OVERLOADED, 4096)
    assert info.value.kind is FailureKind.STREAM_ERROR and b"overloaded_error" in info.value.body


async def test_an_end_before_content_yields_nothing():
    assert await held(START + TEXT_START, 4096) == []


def test_the_relay_passes_events_through_and_reads_usage():
    relay = AnthropicRelay()
    delta = anthropic_event("message_delta", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 3}})
    sent = relay.feed(START + DELTA) + relay.feed(delta + STOP + b"data: [DONE]\n\n")
    assert sent == START + DELTA + delta + STOP
    assert (relay.prompt_tokens, relay.completion_tokens) == (9, 3)


def test_the_relay_turns_the_gateways_terminal_frame_into_an_error_event():
    relay = AnthropicRelay()
    terminal = b'\n\ndata: {"error":{"message":"the upstream stream broke","type":"upstream_error"}}\n\n'
    out = relay.feed(START + DELTA[:20]) + relay.feed(DELTA[20:] + terminal)
    assert out == START + DELTA + anthropic_event(
        "error", {"type": "error", "error": {"type": "api_error", "message": "the upstream stream broke"}}
    )


async def test_an_error_event_after_content_ends_the_stream_as_broken_with_one_error_event():
    out = await held(START + DELTA + OVERLOADED + STOP, 4096)
    assert b"".join(out) == START + DELTA + OVERLOADED  # no [DONE]: the relay counts the stream as broken
    relay = AnthropicRelay()
    terminal = b'data: {"error":{"message":"it ended without data: [DONE]","type":"upstream_error"}}\n\n'
    assert relay.feed(b"".join(out)) + relay.feed(terminal) == START + DELTA + OVERLOADED
