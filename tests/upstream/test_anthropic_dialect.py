"""Anthropic Messages API behind the OpenAI chat shape, against the mock's Anthropic route."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects import get_dialect
from routing.upstream.dialects.anthropic import translate_sse
from tests.upstream.conftest import call, model, model_at, provider, sse_payloads, stream

PNG = "data:image/png;base64,iVBORw0KGgo="
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


def sent(mock, name: str = "claude-up") -> dict:
    return mock.state.calls(name)["requests"][-1]


async def test_request_is_translated_to_the_messages_api(mock, transport):
    spec = model_at(mock, "anthropic", "claude-up")
    body = {
        "model": "public",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                ],
            },
        ],
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "user": "u-42",
    }
    await call(transport, spec, "chat", body, api_key="sk-ant")
    got = sent(mock)
    assert got["path"] == "/anthropic/v1/messages"
    assert got["headers"]["x-api-key"] == "sk-ant"
    assert got["headers"]["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in got["headers"]
    assert got["body"] == {
        "model": "claude-up",
        "max_tokens": 4096,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                ],
            }
        ],
        "system": "Be brief.\n\nBe kind.",
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-42"},
    }


async def test_client_max_tokens_wins_over_the_default(mock, transport):
    spec = model_at(mock, "anthropic", "claude-up")
    await call(transport, spec, "chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50})
    assert sent(mock)["body"]["max_tokens"] == 50


async def test_tool_round_trip_is_translated_both_ways(mock, transport):
    spec = model_at(mock, "anthropic", "claude-up")
    first = await call(
        transport,
        spec,
        "chat",
        {"messages": [{"role": "user", "content": "find cats"}], "tools": TOOLS, "tool_choice": "required"},
    )
    out = orjson.loads(first.body)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call_ = choice["message"]["tool_calls"][0]
    assert call_ == {
        "id": "toolu_mock1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"query":"mock"}'},
    }
    got = sent(mock)["body"]
    assert got["tools"] == [
        {"name": "lookup", "input_schema": TOOLS[0]["function"]["parameters"], "description": "Look something up"}
    ]
    assert got["tool_choice"] == {"type": "any"}

    second = await call(
        transport,
        spec,
        "chat",
        {
            "messages": [
                {"role": "user", "content": "find cats"},
                {"role": "assistant", "content": None, "tool_calls": [call_]},
                {"role": "tool", "tool_call_id": "toolu_mock1", "content": "3 cats"},
            ],
            "tools": TOOLS,
        },
    )
    got = sent(mock)["body"]
    assert got["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_mock1", "name": "lookup", "input": {"query": "mock"}}],
    }
    assert got["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_mock1", "content": "3 cats"}],
    }
    answer = orjson.loads(second.body)["choices"][0]
    assert answer["finish_reason"] == "stop" and "tool_calls" not in answer["message"]


def test_consecutive_tool_results_share_one_user_turn():
    spec = model("claude-up", provider(dialect="anthropic"))
    body = {
        "messages": [
            {"role": "user", "content": "two lookups"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "user", "content": "and?"},
        ]
    }
    prepared = get_dialect("anthropic").build_request("chat", body, spec, "http://x/v1", None, False)
    messages = orjson.loads(prepared.body)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert messages[1]["content"][1]["input"] == {"x": 1}


def test_parallel_tool_calls_false_disables_parallel_use():
    spec = model("claude-up", provider(dialect="anthropic"))
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "tools": TOOLS,
        "parallel_tool_calls": False,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
    }
    prepared = get_dialect("anthropic").build_request("chat", body, spec, "http://x/v1", None, False)
    assert orjson.loads(prepared.body)["tool_choice"] == {
        "type": "tool",
        "name": "lookup",
        "disable_parallel_tool_use": True,
    }


def test_malformed_tool_arguments_are_a_client_error_naming_the_field():
    spec = model("claude-up", provider(dialect="anthropic"))
    body = {
        "messages": [
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{nope"}}]}
        ]
    }
    with pytest.raises(GatewayError) as info:
        get_dialect("anthropic").build_request("chat", body, spec, "http://x/v1", None, False)
    assert info.value.code == "invalid_request" and info.value.param == "messages[0].tool_calls[0]"


async def test_answer_becomes_a_chat_completion_with_usage(mock, transport):
    parsed = await call(
        transport, model_at(mock, "anthropic", "claude-up"), "chat", {"messages": [{"role": "user", "content": "hi"}]}
    )
    out = orjson.loads(parsed.body)
    assert out["object"] == "chat.completion" and out["id"] == "msg_mock" and out["model"] == "claude-up"
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hello from the mock upstream."}
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
    assert parsed.usage == (12, 7)


@pytest.mark.parametrize(
    ("stop", "finish"), [("max_tokens", "length"), ("stop_sequence", "stop"), ("end_turn", "stop")]
)
async def test_stop_reasons_map_to_finish_reasons(mock, transport, stop, finish):
    body = orjson.dumps(
        {
            "id": "m",
            "content": [{"type": "text", "text": "x"}],
            "stop_reason": stop,
            "usage": {"input_tokens": 1, "output_tokens": 2},
        }
    )
    mock.state.model("claude-up").steps.append({"body": body.decode()})
    parsed = await call(
        transport, model_at(mock, "anthropic", "claude-up"), "chat", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert orjson.loads(parsed.body)["choices"][0]["finish_reason"] == finish


async def test_stream_becomes_openai_chunks_ending_with_done(mock, transport):
    spec = model_at(mock, "anthropic", "claude-up")
    raw = await stream(transport, spec, {"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert sent(mock)["body"]["stream"] is True
    payloads = sse_payloads(raw)
    assert payloads[-1] == b"[DONE]" and raw.endswith(b"data: [DONE]\n\n")
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "msg_mock" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "tok0 "}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "tok0 tok1 tok2 "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


async def test_streamed_tool_use_becomes_tool_call_deltas(mock, transport):
    spec = model_at(mock, "anthropic", "claude-up")
    raw = await stream(
        transport, spec, {"messages": [{"role": "user", "content": "hi"}], "stream": True, "tools": TOOLS}
    )
    chunks = [orjson.loads(p) for p in sse_payloads(raw)[:-1]]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "toolu_mock1",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"query": "mock"}'
    assert all(tc["index"] == 0 for tc in calls)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_stream_without_message_stop_ends_without_done(mock, transport):
    mock.state.model("claude-up").steps.append({"no_done": True})
    raw = await stream(transport, model_at(mock, "anthropic", "claude-up"), {"messages": [], "stream": True})
    assert b"tok2" in raw and b"[DONE]" not in raw


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _event(payload: dict) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


async def test_error_event_becomes_one_terminal_error_frame():
    upstream = (
        _event({"type": "message_start", "message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 3}}})
        + _event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        + _event({"type": "message_stop"})
    )
    out = b"".join([f async for f in translate_sse(_pieces(upstream, 1000), model())])
    assert sse_payloads(out) == [out[6:-2]]  # exactly one frame, and it is the first
    err = orjson.loads(sse_payloads(out)[0])["error"]
    assert err["type"] == "overloaded_error" and err["message"] == "Overloaded"
    assert b"[DONE]" not in out


async def test_translation_does_not_depend_on_chunk_boundaries():
    upstream = (
        _event({"type": "message_start", "message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 3}}})
        + _event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "héllo"}})
        + _event({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 5}})
        + _event({"type": "message_stop"})
    )

    def stable(out: bytes) -> bytes:  # each translated stream stamps its own "created" second
        return re.sub(rb'"created":\d+', b'"created":0', out)

    whole = b"".join([f async for f in translate_sse(_pieces(upstream, len(upstream)), model())])
    crlf = upstream.replace(b"\n", b"\r\n")
    for size, data in ((1, upstream), (7, upstream), (5, crlf)):
        assert stable(b"".join([f async for f in translate_sse(_pieces(data, size), model())])) == stable(whole)
    last = orjson.loads(sse_payloads(whole)[-2])
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["total_tokens"] == 8


async def test_overloaded_529_is_a_provider_fault(mock, transport):
    body = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    mock.state.model("claude-up").steps.append({"status": 529, "body": body})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "anthropic", "claude-up"), "chat", {"messages": []})
    assert info.value.kind is FailureKind.UPSTREAM_5XX and info.value.is_retryable


async def test_prompt_too_long_is_context_length(mock, transport):
    body = '{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 300000 tokens > 200000 maximum"}}'
    mock.state.model("claude-up").steps.append({"status": 400, "body": body})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "anthropic", "claude-up"), "chat", {"messages": []})
    assert info.value.kind is FailureKind.CONTEXT_LENGTH


async def test_invalid_json_answer_is_invalid_body(mock, transport):
    mock.state.model("claude-up").steps.append({"invalid_json": True})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "anthropic", "claude-up"), "chat", {"messages": []})
    assert info.value.kind is FailureKind.INVALID_BODY


@pytest.mark.parametrize("kind", ["embeddings", "rerank", "responses"])
def test_only_chat_is_supported(kind):
    spec = model("claude-up", provider(dialect="anthropic"))
    with pytest.raises(GatewayError) as info:
        get_dialect("anthropic").build_request(kind, {}, spec, "http://x/v1", None, False)
    assert info.value.code == "unsupported_capability" and info.value.status == 400
