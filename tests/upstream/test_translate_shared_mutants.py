"""What the translators share, pinned where the broader tests leave it loose (docs/translation.md):
the Anthropic error body a Messages client reads, the stop reason of a chat choice, an image block's
URL and its refusals, tool calls both ways, the usage objects, the reasoning text and its gate, the
pass-through's hold before the commit (the pre-commit failure's message, the hold's length) and the
unsigned thinking blocks a Claude link never sees. Pure functions on recorded shapes, in process;
each test kills mutants the broader tests let live (docs/testing.md "Mutation testing")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.translate import messages_passthrough
from routing.upstream.translate.shared import (
    HOLD_MAX_EVENTS,
    anthropic_usage,
    chat_gaps,
    error_body,
    error_type,
    image_url_of,
    reasoning_gated,
    reasoning_of,
    stop_of,
    tool_call_of,
    tool_use_of,
    usage_object,
    usage_of,
    without_foreign_thinking,
)


def refusal(call: Any, *args: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        call(*args)
    return caught.value


# --- the Anthropic error body --------------------------------------------------------------


def test_an_error_body_is_anthropics_shape_with_the_request_id():
    body = orjson.loads(error_body(429, "slow down", None, "req_1"))
    assert body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": "req_1",
    }


def test_an_error_body_keeps_the_upstreams_own_type_and_has_no_request_id_without_one():
    body = orjson.loads(error_body(500, "busy", "overloaded_error"))
    assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}


@pytest.mark.parametrize(
    ("status", "kind"), [(418, "invalid_request_error"), (499, "invalid_request_error"), (502, "api_error")]
)
def test_a_status_outside_the_table_is_a_client_or_an_api_error(status: int, kind: str):
    assert error_type(status) == kind
    assert error_type(status, "no_such_type") == kind


# --- stop reasons ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"finish_reason": "length", "stop_reason": "</end>"}, ("max_tokens", None)),
        ({"finish_reason": "length", "stop_reason": 7}, ("max_tokens", None)),
        ({"finish_reason": "weird"}, ("end_turn", None)),
        ({"finish_reason": None}, ("end_turn", None)),
        ({"finish_reason": "stop", "stop_reason": "</end>"}, ("stop_sequence", "</end>")),
    ],
)
def test_a_matched_string_is_a_stop_sequence_only_on_a_stop(choice: dict[str, Any], expected: tuple[Any, Any]):
    assert stop_of(choice) == expected


# --- images and tool calls -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("https://x/cat.png", "messages[0].content[1].source must be an object"),
        ({"type": "base64", "media_type": "image/png"}, "needs string media_type and data"),
        ({"type": "base64", "data": "AAAA"}, "needs string media_type and data"),
        ({"type": "file", "url": "https://x/cat.png"}, "source.type must be base64 or url (with its fields)"),
        ({"type": "url"}, "source.type must be base64 or url (with its fields)"),
    ],
)
def test_an_image_source_that_is_not_base64_or_a_url_is_refused_by_name(source: Any, words: str):
    error = refusal(image_url_of, {"type": "image", "source": source}, "messages[0].content[1]")
    assert error.status == 400
    assert words in error.message
    assert error.param == "messages[0].content[1].source"


def test_an_image_source_becomes_a_data_uri_or_its_url():
    base64 = {"source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    assert image_url_of(base64, "p") == "data:image/png;base64,AAAA"
    assert image_url_of({"source": {"type": "url", "url": "https://x/cat.png"}}, "p") == "https://x/cat.png"


def test_a_tool_call_that_is_not_a_function_call_is_refused_by_its_place():
    error = refusal(tool_use_of, {"type": "function"}, "messages[1].tool_calls[0]")
    assert error.param == "messages[1].tool_calls[0]"
    assert error.message.startswith("messages[1].tool_calls[0] must be a function tool call")


def test_a_tool_use_block_without_id_or_name_is_a_call_with_empty_strings():
    assert tool_call_of({"type": "tool_use"}) == {
        "id": "",
        "type": "function",
        "function": {"name": "", "arguments": "{}"},
    }


# --- usage -------------------------------------------------------------------------------------


def test_an_anthropic_usage_without_counts_is_zero_not_one():
    assert anthropic_usage({}) == (None, None, {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})


def test_a_usage_object_counts_unknown_as_zero_and_names_no_cache_unless_asked():
    assert usage_object(None, None) == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert usage_object(3, 4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 4, "input_tokens": 30, "output_tokens": 40}, (3, 4)),
        ({"input_tokens": 30, "output_tokens": 40}, (30, 40)),
        ({"prompt_tokens": "3", "completion_tokens": 4.0}, (None, None)),
    ],
)
def test_chat_counts_come_first_and_only_integers_count(usage: dict[str, Any], expected: tuple[Any, Any]):
    assert usage_of({"usage": usage}) == expected


# --- reasoning ---------------------------------------------------------------------------------


def test_an_empty_or_non_text_reasoning_content_gives_way_to_reasoning():
    assert reasoning_of({"reasoning_content": "", "reasoning": "because"}) == "because"
    assert reasoning_of({"reasoning_content": 5}) == ""


def test_a_link_that_reasons_keeps_the_effort_and_names_the_hints_already_dropped():
    chat = {"model": "m", "reasoning_effort": "high"}
    assert reasoning_gated(chat, {"reasoning"}, ["seed", "user"], ["thinking"]) == (None, "seed, user")


# --- the pass-through's hold before the commit ---------------------------------------------------


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def drained(*parts: bytes) -> list[bytes]:
    return [bytes(chunk) async for chunk in messages_passthrough.held_until_content(chunks(*parts))]


async def pre_commit_failure(*parts: bytes) -> UpstreamFailure:
    with pytest.raises(UpstreamFailure) as caught:
        await drained(*parts)
    assert caught.value.kind is FailureKind.STREAM_ERROR
    return caught.value


PING = b"event: ping\ndata: {}\n\n"
DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"x"}}\n\n'


async def test_an_error_event_named_only_by_its_data_fails_before_the_commit():
    failure = await pre_commit_failure(b'data: {"type":"error","error":{"type":"overloaded_error"}}\n\n')
    assert (
        failure.message
        == 'the upstream stream started with an error: {"type":"error","error":{"type":"overloaded_error"}}'
    )


async def test_a_data_only_content_event_is_the_commit():
    frame = b'data: {"type":"content_block_delta","delta":{"text":"x"}}\n\n'
    assert await drained(PING + frame) == [PING + frame]


async def test_an_error_event_without_data_is_a_failure_with_no_detail():
    failure = await pre_commit_failure(b"event: error\n\n")
    assert failure.message == "the upstream stream started with an error: "


async def test_the_failure_quotes_at_most_300_characters_of_the_error_with_bad_bytes_replaced():
    data = b"\xff" + b"e" * 400
    failure = await pre_commit_failure(b"event: error\ndata: " + data + b"\n\n")
    assert failure.message == "the upstream stream started with an error: \ufffd" + "e" * 299
    assert failure.body == data


async def test_an_error_after_the_longest_hold_is_still_a_pre_commit_failure():
    await pre_commit_failure(PING * HOLD_MAX_EVENTS + b"event: error\ndata: {}\n\n")


async def test_the_hold_ends_after_one_event_more_than_its_length():
    out = await drained(PING * (HOLD_MAX_EVENTS + 1), b"event: error\ndata: {}\n\n")
    assert out == [PING * (HOLD_MAX_EVENTS + 1), b"event: error\ndata: {}\n\n"]


# --- thinking blocks no Anthropic model signed -------------------------------------------------


UNSIGNED = {"type": "thinking", "thinking": "hmm", "signature": ""}


def test_a_user_turn_with_an_unsigned_thinking_block_is_not_touched():
    body = {"messages": [{"role": "user", "content": [UNSIGNED, {"type": "text", "text": "hi"}]}]}
    assert without_foreign_thinking(body) is None


def test_only_the_assistant_turns_lose_their_unsigned_thinking():
    user = {"role": "user", "content": [UNSIGNED, {"type": "text", "text": "hi"}]}
    answer = {"role": "assistant", "content": [UNSIGNED, {"type": "text", "text": "hello"}]}
    body = {"messages": ["raw", user, answer]}
    assert without_foreign_thinking(body) == {
        "messages": ["raw", user, {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]
    }


# --- chat fields without a counterpart ---------------------------------------------------------


def test_a_refused_chat_field_names_the_protocol_the_client_speaks():
    error = refusal(chat_gaps, {"n": 2}, "claude", "anthropic", ("n",), ())
    assert error.param == "n"
    assert "pick a model whose provider speaks OpenAI's Chat Completions API itself" in error.message
