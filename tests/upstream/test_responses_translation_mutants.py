"""`/v1/responses` translation, found by mutation testing (docs/testing.md#mutation-testing).

What a Responses client sees of the two Responses pairs that the recorded wire fixtures
(tests/upstream/test_translators.py) and the SDK tests do not pin down: the chat body each
request field becomes, the 400 naming a field a chat upstream cannot take, the `response`
object and the events of an answer (including an upstream's error, a cut stream and odd
upstream values), and the relayed stream's error event, usage and estimate.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.stream import SAMPLE_BYTES
from routing.upstream.translate.responses_passthrough import CHARS_COUNTED, ResponsesRelay
from routing.upstream.translate.responses_to_chat import ResponsesEvents, chat_request, response_of

# --- the request ---------------------------------------------------------------------------------


def refused(body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        chat_request(body)
    assert caught.value.status == 400
    return caught.value


def messages(items: Any) -> list[dict[str, Any]]:
    return chat_request({"input": items})["messages"]


def test_sampling_and_identity_fields_reach_the_chat_body_under_their_chat_names() -> None:
    dropped: list[str] = []
    body = {"input": "hi", "temperature": 0.2, "top_p": 0.9, "user": "u-1", "safety_identifier": "s-1"}
    assert chat_request({**body, "top_logprobs": 3}, dropped) == {
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "u-1",
        "safety_identifier": "s-1",
    }
    assert dropped == ["top_logprobs"]  # named in x-switchboard-dropped: the answer has no log probabilities
    assert chat_request({"input": "hi", "top_logprobs": 0}, dropped := []) and dropped == []


def test_an_unhostable_tool_is_dropped_even_when_the_caller_keeps_no_list() -> None:
    assert chat_request({"input": "hi", "tools": [{"type": "web_search"}]}) == {
        "messages": [{"role": "user", "content": "hi"}]
    }


def test_a_previous_response_id_is_refused_by_name() -> None:
    error = refused({"input": "hi", "previous_response_id": "resp_1"})
    assert error.param == "previous_response_id"
    assert "a previous_response_id (no stored response to continue from) cannot be sent" in error.message


def test_message_contents_of_every_shape_become_chat_content() -> None:
    items = [
        {"role": "user", "content": "plain"},  # no type: a message; a string content stays one
        {"type": "message", "content": None},  # no role: the user's; no content: ""
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}, {"type": "output_text", "text": "a"}]},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "b"}, {"type": "input_text"}, {"type": "text", "text": "c"}],
        },
    ]
    assert messages(items) == [
        {"role": "user", "content": "plain"},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "a"},  # a refusal part has no chat counterpart: left out
        {"role": "user", "content": "bc"},  # text parts joined as they are, a part without text as ""
    ]


@pytest.mark.parametrize(
    ("item", "param", "what"),
    [
        (
            {"role": "user", "content": [{"type": "input_audio"}]},
            "input[1].content[0].type",
            "a 'input_audio' content part",
        ),
        ({"role": "user", "content": [5]}, "input[1].content[0].type", "a None content part"),
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": {"url": "https://x/i.png"}}]},
            "input[1].content[0].type",
            "a 'input_image' content part",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file"}]},
            "input[1].output[0].type",
            "'input_file'",
        ),
        ({"type": "web_search_call", "id": "ws_1"}, "input[1].type", "an input item of type 'web_search_call'"),
    ],
)
def test_an_item_or_part_with_no_chat_counterpart_is_refused_naming_it(item: dict, param: str, what: str) -> None:
    error = refused({"input": [{"role": "user", "content": "hi"}, item]})
    assert error.param == param
    assert what in error.message and "cannot be sent to this model's provider" in error.message


def test_function_calls_join_the_assistant_message_before_them_and_outputs_become_tool_messages() -> None:
    items = [
        {"type": "function_call", "call_id": "c0", "name": "a", "arguments": "{}"},  # first: its own message
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "calling"},
        {"type": "function_call", "id": "fc_1", "name": "b", "arguments": '{"x":1}'},  # no call_id: the item's id
        {"type": "function_call"},  # nothing: "" and "{}"
        {"type": "function_call_output", "output": [{"type": "input_text", "text": "18 C"}]},
        {"type": "function_call", "call_id": "c3", "name": "c"},
    ]

    def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    assert messages(items) == [
        {"role": "assistant", "content": None, "tool_calls": [call("c0", "a", "{}")]},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "calling", "tool_calls": [call("fc_1", "b", '{"x":1}'), call("", "", "{}")]},
        {"role": "tool", "tool_call_id": "", "content": "18 C"},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "c", "{}")]},
    ]


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    body = chat_request({"input": "hi", "tools": [{"type": "function", "name": "now"}]})
    assert body["tools"] == [
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
    ]


def test_tool_choice_naming_a_function_takes_the_chat_shape_and_naming_a_hosted_tool_is_refused() -> None:
    body = chat_request({"input": "hi", "tool_choice": {"type": "function", "name": "f"}})
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat_request({"input": "hi", "tool_choice": "required"})["tool_choice"] == "required"
    error = refused({"input": "hi", "tool_choice": {"type": "web_search"}})
    assert error.param == "tool_choice" and "a tool_choice of type 'web_search' cannot be sent" in error.message


def test_text_formats_become_response_formats() -> None:
    assert "response_format" not in chat_request({"input": "hi", "text": {"format": {"type": "text"}}})
    body = chat_request({"input": "hi", "text": {"format": {"type": "json_object"}}})
    assert body["response_format"] == {"type": "json_object"}
    schema = {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "description": "d"}
    body = chat_request({"input": "hi", "text": {"format": schema}})
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}, "description": "d"},
    }
    error = refused({"input": "hi", "text": {"format": {"type": "grammar"}}})
    assert error.param == "text.format.type" and "a text format of type 'grammar' cannot be sent" in error.message


def test_a_reasoning_effort_that_is_not_a_string_is_refused_by_name() -> None:
    error = refused({"input": "hi", "reasoning": {"effort": 3}})
    assert error.param == "reasoning.effort"
    assert error.message.startswith("Invalid 'reasoning.effort': reasoning.effort must be a string.")


# --- the answer ----------------------------------------------------------------------------------


def completion(message: Any = None, usage: Any = None, **choice: Any) -> dict[str, Any]:
    return {"id": "c1", "model": "m", "choices": [{"index": 0, "message": message or {}, **choice}], "usage": usage}


ZERO_USAGE = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}


def test_reasoning_text_and_calls_become_output_items_with_their_ids() -> None:
    message = {
        "reasoning_content": "think",
        "content": "",  # empty: no message item
        "tool_calls": [{"id": "call_a", "function": "not an object"}, "junk", {"function": {"name": "f"}}],
    }
    out = response_of(completion(message, finish_reason="tool_calls"))
    assert out["id"] == "resp_c1" and out["status"] == "completed" and out["incomplete_details"] is None
    assert out["output"] == [
        {"id": "rs_c1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {
            "id": "fc_call_a",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_a",
            "name": "",
            "arguments": "",
        },
        {
            "id": "fc_call_1",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_1",
            "name": "",
            "arguments": "",
        },
        {
            "id": "fc_call_2",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_2",
            "name": "f",
            "arguments": "",
        },
    ]


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_a_cut_answer_is_incomplete_with_its_reason(finish: str, reason: str) -> None:
    out = response_of(completion({"content": "partial"}, finish_reason=finish))
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": reason}


@pytest.mark.parametrize("data", [None, {}, {"choices": []}, {"choices": ["x"]}, {"choices": [{"message": "hi"}]}])
def test_a_malformed_completion_gives_an_empty_completed_response(data: Any) -> None:
    out = response_of(data)
    assert (out["id"], out["model"], out["status"], out["output"], out["usage"]) == (
        "resp_chat",
        "",
        "completed",
        [],
        ZERO_USAGE,
    )


def test_an_answer_without_an_id_gets_the_default_item_ids_and_an_odd_finish_reason_is_ignored() -> None:
    out = response_of({"choices": [{"message": {"content": "hi"}, "finish_reason": {"odd": 1}}]})
    assert out["id"] == "resp_chat" and out["status"] == "completed"
    assert [item["id"] for item in out["output"]] == ["msg_chat"]


@pytest.mark.parametrize(
    "usage",
    [
        None,
        "12",
        {"prompt_tokens": "5", "completion_tokens": None, "prompt_tokens_details": {"cached_tokens": "x"}},
        {"prompt_tokens_details": None, "completion_tokens_details": {"reasoning_tokens": "y"}},
    ],
)
def test_usage_values_that_are_not_counts_are_zero(usage: Any) -> None:
    assert response_of(completion({"content": "hi"}, usage))["usage"] == ZERO_USAGE


def test_usage_without_details_reports_zero_cached_and_reasoning_tokens() -> None:
    usage = response_of(completion({"content": "hi"}, {"prompt_tokens": 3, "completion_tokens": 2}))["usage"]
    assert usage == {**ZERO_USAGE, "input_tokens": 3, "output_tokens": 2, "total_tokens": 5}


# --- the answer, streamed --------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"id": "c1", "model": "m"}
    if delta is not None:
        obj["choices"] = [{"index": 0, "delta": delta}]
    obj.update(extra)
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def events(data: bytes) -> list[dict[str, Any]]:
    """The Responses events of SSE bytes, each as its data with the event's name checked against its type."""
    out = []
    for frame in data.split(b"\n\n"):
        if frame:
            name, payload = frame.split(b"\n", 1)
            event = orjson.loads(payload.removeprefix(b"data: "))
            assert name == b"event: " + event["type"].encode()
            out.append(event)
    return out


def streamed(*frames: bytes) -> tuple[list[dict[str, Any]], ResponsesEvents]:
    tap = ResponsesEvents()
    sent = b"".join(tap.feed(frame) for frame in frames) + tap.flush()
    found = events(sent)
    assert [e["sequence_number"] for e in found] == list(range(len(found)))
    return found, tap


def test_an_upstream_error_in_the_stream_ends_it_with_a_responses_error_event() -> None:
    tap = ResponsesEvents()
    head = tap.feed(chunk({"content": "hi"}))
    sent = events(tap.feed(chunk(error={"message": "overloaded", "code": "server_error"}) + chunk({"content": "x"})))
    assert sent == [
        {
            "type": "error",
            "sequence_number": len(events(head)),
            "code": "server_error",
            "message": "overloaded",
            "param": None,
        }
    ]
    assert tap.feed(chunk({"content": "more"})) == b"" and tap.flush() == b""


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ("boom", "upstream_stream_error", "boom"),
        ({}, "upstream_stream_error", "the upstream stream failed; retry the request"),
    ],
)
def test_an_upstream_error_without_its_fields_gets_the_defaults(error: Any, code: str, message: str) -> None:
    found, _ = streamed(chunk(error=error))
    assert found == [{"type": "error", "sequence_number": 0, "code": code, "message": message, "param": None}]


def test_a_stream_cut_before_its_end_ends_with_an_error_event() -> None:
    found, tap = streamed(chunk({"content": "hi"}))
    assert found[-1] == {
        "type": "error",
        "sequence_number": len(found) - 1,
        "code": "upstream_stream_error",
        "message": "the upstream stream ended unexpectedly; retry the request",
        "param": None,
    }
    assert tap.flush() == b""


def test_a_stream_of_only_its_end_is_an_empty_completed_response_without_id_or_model() -> None:
    tap = ResponsesEvents()
    assert (tap.final, tap.prompt_tokens, tap.completion_tokens, tap.classes) == (False, None, None, None)
    found = events(tap.feed(DONE))
    assert [e["type"] for e in found] == ["response.created", "response.in_progress", "response.completed"]
    response = found[-1]["response"]
    assert (response["id"], response["model"], response["output"], response["usage"]) == (
        "resp_chat",
        "",
        [],
        ZERO_USAGE,
    )
    assert tap.feed(chunk({"content": "late"})) == b""
    assert (tap.final, tap.prompt_tokens) == (False, None)


def test_a_chunk_without_id_or_model_names_the_response_by_default() -> None:
    found, _ = streamed(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n', DONE)
    assert found[0]["response"]["id"] == "resp_chat" and found[0]["response"]["model"] == ""
    assert found[2]["item"]["id"] == "msg_resp_chat_0"


def test_only_the_first_choice_is_streamed_and_a_choice_without_index_is_it() -> None:
    other = b'data: {"choices": [{"index": 1, "delta": {"content": "other"}}]}\n\n'
    first = b'data: {"choices": [{"delta": {"content": "mine"}, "finish_reason": "length"}]}\n\n'
    found, _ = streamed(other, first, DONE)
    assert [e["delta"] for e in found if e["type"] == "response.output_text.delta"] == ["mine"]
    response = found[-1]["response"]
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_completion_count_that_is_not_an_integer_is_not_reported() -> None:
    _, tap = streamed(chunk(usage={"prompt_tokens": 5, "completion_tokens": "x"}), DONE)
    assert (tap.prompt_tokens, tap.completion_tokens, tap.final) == (5, None, True)


def test_text_then_reasoning_then_a_call_then_text_are_four_items_each_closed_before_the_next() -> None:
    found, _ = streamed(
        chunk({"content": "a"}),
        chunk({"reasoning_content": "r"}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({"content": "b"}),
        DONE,
    )
    done = [e["item"] for e in found if e["type"] == "response.output_item.done"]
    assert [(item["type"], item["id"]) for item in done] == [
        ("message", "msg_resp_c1_0"),
        ("reasoning", "rs_resp_c1_1"),
        ("function_call", "fc_call_1"),
        ("message", "msg_resp_c1_3"),
    ]
    assert found[-1]["response"]["output"] == done


def test_a_reasoning_item_streams_its_summary_part_with_its_place() -> None:
    found, _ = streamed(chunk({"reasoning_content": "th"}), chunk({"reasoning": "ink"}), DONE)
    where = {"item_id": "rs_resp_c1_0", "output_index": 0, "summary_index": 0}
    assert [{k: v for k, v in e.items() if k != "sequence_number"} for e in found[2:-1]] == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_resp_c1_0", "type": "reasoning", "summary": []},
        },
        {"type": "response.reasoning_summary_part.added", **where, "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": "th"},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": "ink"},
        {"type": "response.reasoning_summary_text.done", **where, "text": "think"},
        {"type": "response.reasoning_summary_part.done", **where, "part": {"type": "summary_text", "text": "think"}},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "rs_resp_c1_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        },
    ]


def test_tool_calls_are_told_apart_by_index_and_default_to_index_0() -> None:
    found, _ = streamed(
        chunk({"tool_calls": [{"function": None}]}),  # no index, id, name: call_0, ""
        chunk({"tool_calls": [{"function": {"arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "1}"}}]}),  # index 0 again: its item is closed
        DONE,
    )
    done = [e["item"] for e in found if e["type"] == "response.output_item.done"]
    assert done == [
        {
            "id": "fc_call_0",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_0",
            "name": "",
            "arguments": '{"a":',
        },
        {
            "id": "fc_call_b",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_b",
            "name": "g",
            "arguments": "{}",
        },
    ]


@pytest.mark.parametrize(
    "delta",
    [
        lambda s: {"content": s},
        lambda s: {"reasoning_content": s},
        lambda s: {"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": s}}]},
    ],
)
def test_a_cut_streams_estimate_counts_every_delta_and_its_characters(delta: Any) -> None:
    _, few = streamed(*(chunk(delta("a")) for _ in range(3)))
    assert few.estimated_completion_tokens() == 3  # at least one a frame
    _, long = streamed(*(chunk(delta("abcdefgh")) for _ in range(2)))
    assert long.estimated_completion_tokens() == 4  # four characters a token


# --- the relayed stream ----------------------------------------------------------------------------


def relay(*frames: bytes) -> tuple[bytes, ResponsesRelay]:
    tap = ResponsesRelay()
    return b"".join(tap.feed(frame) for frame in frames), tap


def gateway_error(error: Any) -> bytes:
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


def test_the_gateways_terminal_frame_becomes_one_error_event_with_the_next_sequence_number() -> None:
    sent, tap = relay(
        gateway_error({"message": "cut", "code": "upstream_timeout"}), gateway_error({"message": "again"})
    )
    assert events(sent) == [
        {"type": "error", "code": "upstream_timeout", "message": "cut", "param": None, "sequence_number": 0}
    ]
    assert (tap.final, tap.prompt_tokens, tap.completion_tokens) == (False, None, None)


@pytest.mark.parametrize("error", ["boom", {}, None])
def test_a_terminal_frame_without_its_fields_gets_the_defaults(error: Any) -> None:
    seq = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":6,"delta":"x"}\n\n'
    sent, _ = relay(seq, gateway_error(error))
    assert events(sent)[-1] == {
        "type": "error",
        "code": "upstream_stream_error",
        "message": "the upstream stream failed; retry the request",
        "param": None,
        "sequence_number": 7,
    }


def test_after_the_upstreams_own_error_event_the_gateways_terminal_frame_is_dropped() -> None:
    own = b'event: error\ndata: {"type":"error","code":"x","message":"y","sequence_number":2}\n\n'
    sent, _ = relay(own, gateway_error({"message": "cut"}))
    assert sent == own


def test_unnamed_events_pass_unchanged_and_their_usage_is_read() -> None:
    completed = {
        "type": "response.completed",
        "sequence_number": 3,
        "response": {"usage": {"input_tokens": 4, "output_tokens": 2}},
    }
    frames = (
        b"event: keepalive\n\n",  # no data at all
        b'data: {"type":"response.output_text.delta","delta":"sequence_number"}\n\n',  # the key's name, as a value
        b"data: " + orjson.dumps(completed) + b"\n\n",
    )
    sent, tap = relay(*frames)
    assert sent == b"".join(frames)
    assert (tap.prompt_tokens, tap.completion_tokens, tap.final) == (4, 2, True)


def test_a_failed_responses_usage_is_read_and_an_end_without_a_response_is_no_usage() -> None:
    failed = {
        "type": "response.failed",
        "sequence_number": 3,
        "response": {"usage": {"input_tokens": 4, "output_tokens": 0}},
    }
    _, tap = relay(b"event: response.failed\ndata: " + orjson.dumps(failed) + b"\n\n")
    assert (tap.prompt_tokens, tap.completion_tokens, tap.final) == (4, 0, True)
    _, tap = relay(b'event: response.completed\ndata: {"type":"response.completed","sequence_number":3}\n\n')
    assert (tap.prompt_tokens, tap.final) == (None, False)


def delta_event(text: Any) -> bytes:
    data = orjson.dumps({"type": "response.output_text.delta", "sequence_number": 1, "delta": text})
    return b"event: response.output_text.delta\ndata: " + data + b"\n\n"


def test_the_estimate_counts_string_deltas_only_and_stops_at_its_cap() -> None:
    _, tap = relay(delta_event("a" * 40), *(delta_event(None) for _ in range(4)))
    assert tap.estimated_completion_tokens() == 10  # 40 characters; 5 frames
    _, tap = relay(delta_event("a" * (CHARS_COUNTED - 1)), delta_event("a"), delta_event("bbbb"))
    assert tap.estimated_completion_tokens() == CHARS_COUNTED // 4  # the characters past the cap are not counted
    assert tap._kept == []


def test_the_relay_keeps_under_sample_bytes_of_uncounted_deltas_and_none_past_the_cap() -> None:
    """The memory bound of a long stream's estimate: deltas are counted once SAMPLE_BYTES of their data
    are kept, and none is kept once CHARS_COUNTED characters are counted."""
    base = len(delta_event("")) - len(b"event: response.output_text.delta\ndata: \n\n")  # the data, no text
    tap = ResponsesRelay()
    tap.feed(delta_event("a" * (SAMPLE_BYTES - 1 - base)))
    assert len(tap._kept) == 1  # one byte short: kept
    tap.feed(delta_event("a"))
    assert tap._kept == []  # past SAMPLE_BYTES: counted
    tap.feed(delta_event("a" * (SAMPLE_BYTES - base)))
    assert tap._kept == []  # exactly SAMPLE_BYTES: counted
    tap.feed(delta_event("a" * (SAMPLE_BYTES - 1 - base)))
    assert len(tap._kept) == 1
    capped = ResponsesRelay()
    capped.feed(delta_event("a" * CHARS_COUNTED))
    capped.feed(delta_event("b"))
    assert capped._kept == [] and capped.estimated_completion_tokens() == CHARS_COUNTED // 4


def test_an_event_without_a_sequence_number_leaves_the_next_error_events_number_alone() -> None:
    frames = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":4,"delta":"a"}\n\n',
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"b"}\n\n',
        b"event: ping\ndata: 99\n\n",  # not a JSON object: its digits are no sequence number
    )
    sent, _ = relay(*frames, gateway_error({"message": "cut"}))
    assert sent.startswith(b"".join(frames))
    assert events(sent.removeprefix(b"".join(frames)))[0]["sequence_number"] == 5
