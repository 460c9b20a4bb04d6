"""The Anthropic Messages endpoint end to end (docs/anthropic-messages.md).

Real server (daphne or uvicorn), the real mock upstream speaking OpenAI and Anthropic,
the official `anthropic` client. Every model is served once by an openai-dialect
upstream and once by an anthropic-dialect one, so both translations are exercised.
"""

from __future__ import annotations

import uuid

import anthropic
import httpx
import orjson
import pytest

from tests.e2e.test_metrics_e2e import scrape
from tests.e2e.test_usage_e2e import COMPLETION_TOKENS, PROMPT_TOKENS, usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 0
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 50
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
  - name: mock-claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
models:
  - id: m-openai
    provider: mock
    upstream_model: msg-openai
    capabilities: [chat, streaming, tools]
  - id: m-claude
    provider: mock-claude
    upstream_model: msg-claude
    capabilities: [chat, streaming, tools]
  - id: m-claude-failing
    provider: mock-claude
    upstream_model: msg-claude-failing
    capabilities: [chat, streaming, tools]
    fallbacks: [m-openai-fb]
  - id: m-openai-fb
    provider: mock
    upstream_model: msg-openai-fb
    capabilities: [chat, streaming, tools]
  - id: m-limited
    provider: mock
    upstream_model: msg-limited
    capabilities: [chat, streaming]
  - id: m-break
    provider: mock
    upstream_model: msg-break
    capabilities: [chat, streaming]
  - id: m-secret
    provider: mock
    upstream_model: msg-secret
    capabilities: [chat]
orgs:
  - name: acme
    policies:
      - pattern: m-secret
        action: deny
        priority: 10
    agents:
      - name: bot
"""
TEXT = "Hello from the mock upstream."
STREAMED = "tok0 tok1 tok2 "
HI = [{"role": "user", "content": "Hello, world"}]
TOOLS = [
    {
        "name": "lookup",
        "description": "Look something up",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }
]
DIALECTS = pytest.mark.parametrize(("model", "upstream"), [("m-openai", "msg-openai"), ("m-claude", "msg-claude")])


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


@pytest.fixture(scope="module")
def client(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key=gw.api_key, max_retries=0, timeout=20)


def last_sent(mock_upstream, upstream: str) -> dict:
    return mock_upstream.calls(upstream)["requests"][-1]


def events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if not frame.strip():
            continue
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        out.append((lines["event"], orjson.loads(lines["data"])))
    return out


# --- answers ---------------------------------------------------------------------------


@DIALECTS
def test_a_message_is_answered_in_anthropic_shape(client, mock_upstream, model, upstream):
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=100,
        system="Be brief.",
        messages=HI,
        stop_sequences=["END"],
        extra_body={"temperature": 0.2},
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert [(b.type, b.text) for b in message.content] == [("text", TEXT)]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert raw.headers["x-switchboard-model-used"] == model
    assert raw.headers["x-request-id"]
    sent = last_sent(mock_upstream, upstream)
    if upstream == "msg-openai":
        assert sent["path"] == "/v1/chat/completions"
        assert sent["body"]["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello, world"},
        ]
        assert (sent["body"]["max_tokens"], sent["body"]["stop"], sent["body"]["temperature"]) == (100, ["END"], 0.2)
    else:  # an Anthropic upstream gets the client's own body, only the model replaced
        assert sent["path"] == "/anthropic/v1/messages"
        assert sent["body"] == {
            "model": "msg-claude",
            "max_tokens": 100,
            "system": "Be brief.",
            "messages": HI,
            "stop_sequences": ["END"],
            "temperature": 0.2,
        }


@DIALECTS
def test_a_tool_call_and_its_result_round_trip(client, mock_upstream, model, upstream):
    first = client.messages.create(model=model, max_tokens=100, messages=HI, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert (call.type, call.name, call.input) == ("tool_use", "lookup", {"query": "mock"})

    history = [
        *HI,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]},
    ]
    second = client.messages.create(model=model, max_tokens=100, messages=history, tools=TOOLS)
    assert second.stop_reason == "end_turn" and second.content[0].text == TEXT
    sent = last_sent(mock_upstream, upstream)["body"]
    if upstream == "msg-openai":
        assert sent["tools"][0]["function"]["name"] == "lookup"
        assert sent["messages"][1]["tool_calls"][0]["id"] == call.id
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "42"}
    else:
        assert sent["tools"][0]["input_schema"] == TOOLS[0]["input_schema"]
        assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}]


# --- streams ---------------------------------------------------------------------------


@DIALECTS
def test_a_stream_is_anthropics_event_sequence(client, gw, mock_upstream, model, upstream):
    with client.messages.stream(model=model, max_tokens=100, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == STREAMED
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)

    body = {"model": model, "max_tokens": 100, "messages": HI, "stream": True}
    raw = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-switchboard-model-used"] == model
    if upstream == "msg-claude":  # an Anthropic upstream's events are relayed byte-identical
        direct = httpx.post(f"{mock_upstream.url}/anthropic/v1/messages", json={**body, "model": upstream}, timeout=20)
        # byte for byte, the model aside: the answer names the model the client asked for
        assert raw.content == direct.content.replace(b'"model":"msg-claude"', b'"model":"m-claude"')
        assert raw.headers["x-switchboard-upstream-model"] == "msg-claude"
        return
    names = [name for name, _ in events(raw.content)]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@DIALECTS
def test_a_streamed_tool_call_arrives_as_input_json_deltas(client, gw, model, upstream):
    with client.messages.stream(model=model, max_tokens=100, messages=HI, tools=TOOLS) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == STREAMED
    assert (final.content[1].name, final.content[1].input) == ("lookup", {"query": "mock"})

    body = {"model": model, "max_tokens": 100, "messages": HI, "tools": TOOLS, "stream": True}
    raw = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    deltas = [e["delta"] for name, e in events(raw.content) if name == "content_block_delta"]
    pieces = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert "".join(pieces) == '{"query": "mock"}' and len(pieces) == 2


def test_a_streams_usage_is_recorded_under_the_messages_endpoint(client, gw):
    with client.messages.stream(model="m-openai", max_tokens=10, messages=HI, metadata={"user_id": "u1"}) as stream:
        stream.get_final_message()
        rid = stream.response.headers["x-request-id"]

    def row() -> dict | None:
        return next((r for r in usage_rows(gw.database_url) if r["request_id"] == rid), None)

    wait_for(lambda: row() is not None, 10, "the messages stream's usage record")
    got = row()
    assert (got["endpoint"], got["streamed"], got["model_used"], got["status"]) == ("messages", True, "m-openai", 200)
    assert (got["prompt_tokens"], got["completion_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)


def test_a_stream_broken_after_commit_ends_with_an_error_event(client, gw, mock_upstream):
    mock_upstream.script("msg-break", [], then={"status": 200, "frames": 3, "break_after": 2})
    body = {"model": "m-break", "max_tokens": 100, "messages": HI, "stream": True}
    raw = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    got = events(raw.content)
    texts = [e["delta"]["text"] for name, e in got if name == "content_block_delta"]
    assert texts == ["tok0 ", "tok1 "]
    name, error = got[-1]
    assert name == "error" and error["type"] == "error"
    assert error["error"]["type"] == "api_error" and error["error"]["message"]
    assert "message_stop" not in [n for n, _ in got]
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(model="m-break", max_tokens=100, messages=HI) as stream,
    ):
        stream.get_final_message()


# --- passthrough to Anthropic upstreams -------------------------------------------------


def test_an_anthropic_upstreams_answer_is_relayed_as_sent(client, gw, mock_upstream):
    answer = {
        "id": "msg_think",
        "type": "message",
        "role": "assistant",
        "model": "msg-claude",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig"},
            {"type": "text", "text": "42", "citations": None},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 2},
    }
    mock_upstream.script("msg-claude", [{"body": orjson.dumps(answer).decode()}])
    raw = client.messages.with_raw_response.create(
        model="m-claude",
        max_tokens=100,
        messages=HI,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        extra_body={"thinking": {"type": "enabled", "budget_tokens": 64}},
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    # thinking block and cache usage included; the model is the one asked for (the upstream's in a header)
    assert raw.http_response.content == orjson.dumps({**answer, "model": "m-claude"})
    assert raw.headers["x-switchboard-upstream-model"] == "msg-claude"
    assert raw.parse().content[0].type == "thinking"
    sent = last_sent(mock_upstream, "msg-claude")["body"]
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}  # prompt caching reaches the upstream
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 64}
    beta = last_sent(mock_upstream, "msg-claude")["headers"]
    assert beta["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert gw.api_key not in beta.values()  # the client's own key never reaches the upstream
    rid = raw.headers["x-request-id"]
    wait_for(lambda: any(r["request_id"] == rid for r in usage_rows(gw.database_url)), 10, "the usage record")
    row = next(r for r in usage_rows(gw.database_url) if r["request_id"] == rid)
    assert (row["endpoint"], row["prompt_tokens"], row["completion_tokens"]) == ("messages", 105, 2)


def _sse(*events: tuple[str, dict]) -> str:
    return "".join(f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n" for name, data in events)


def test_an_error_event_before_content_fails_over_and_after_it_ends_the_stream(client, gw, mock_upstream):
    start = ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}})
    error = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    sse = {"Content-Type": "text/event-stream"}
    mock_upstream.script("msg-claude-failing", [{"body": _sse(start, error), "headers": sse}])
    with client.messages.stream(model="m-claude-failing", max_tokens=10, messages=HI) as stream:
        assert "".join(stream.text_stream) == STREAMED
        assert stream.response.headers["x-switchboard-fallback"] == "stream_error"

    delta = (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "par"}},
    )
    mock_upstream.script("msg-claude-failing", [{"body": _sse(start, delta, error), "headers": sse}])
    body = {"model": "m-claude-failing", "max_tokens": 10, "messages": HI, "stream": True}
    raw = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    assert raw.content.decode() == _sse(start, delta, error)  # committed: the upstream's error event, relayed


def test_an_anthropic_stream_broken_after_commit_ends_with_an_error_event(gw, mock_upstream):
    mock_upstream.script("msg-claude", [{"status": 200, "frames": 3, "break_after": 5}])
    body = {"model": "m-claude", "max_tokens": 10, "messages": HI, "stream": True}
    raw = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    got = events(raw.content)
    assert [e["delta"]["text"] for n, e in got if n == "content_block_delta"] == ["tok0 ", "tok1 "]
    assert got[-1][0] == "error" and got[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [n for n, _ in got]


# --- fallback across dialects ----------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
def test_an_anthropic_upstream_failing_falls_back_to_an_openai_one(client, mock_upstream, streamed):
    mock_upstream.script("msg-claude-failing", [], then={"status": 500})
    before = mock_upstream.count("msg-claude-failing")
    if streamed:
        with client.messages.stream(model="m-claude-failing", max_tokens=10, messages=HI) as stream:
            text = "".join(stream.text_stream)
            headers = stream.response.headers
        assert text == STREAMED
    else:
        raw = client.messages.with_raw_response.create(model="m-claude-failing", max_tokens=10, messages=HI)
        assert raw.parse().content[0].text == TEXT
        headers = raw.headers
    assert headers["x-switchboard-model-used"] == "m-openai-fb"
    assert headers["x-switchboard-fallback"] == "upstream_5xx"
    assert mock_upstream.count("msg-claude-failing") == before + 1
    assert last_sent(mock_upstream, "msg-openai-fb")["path"] == "/v1/chat/completions"


def test_an_anthropic_stream_broken_before_its_first_content_falls_back_cleanly(client, mock_upstream):
    # message_start, content_block_start and a ping, then the connection drops: nothing committed yet
    mock_upstream.script("msg-claude-failing", [], then={"status": 200, "break_after": 3})
    with client.messages.stream(model="m-claude-failing", max_tokens=10, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        headers = stream.response.headers
    assert text == STREAMED and final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]  # one clean message, from the fallback alone
    assert (headers["x-switchboard-model-used"], headers["x-switchboard-fallback"]) == ("m-openai-fb", "stream_error")


# --- errors ----------------------------------------------------------------------------


def test_an_unknown_model_is_not_found_error(client):
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="no-such-model", max_tokens=10, messages=HI)
    assert info.value.status_code == 404
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "not_found_error"
    assert "no-such-model" in info.value.body["error"]["message"]


def test_a_bad_key_is_authentication_error_and_bearer_works_too(gw):
    bad = anthropic.Anthropic(base_url=gw.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad.messages.create(model="m-openai", max_tokens=10, messages=HI)
    assert info.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=gw.url, auth_token=gw.api_key, max_retries=0)
    assert bearer.messages.create(model="m-openai", max_tokens=10, messages=HI).content[0].text == TEXT


def test_a_denied_model_is_permission_error(client):
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        client.messages.create(model="m-secret", max_tokens=10, messages=HI)
    assert info.value.body["error"]["type"] == "permission_error"


@pytest.mark.parametrize("streamed", [False, True])
def test_an_upstream_429_with_nothing_left_is_rate_limit_error(client, mock_upstream, streamed):
    mock_upstream.script("msg-limited", [{"status": 429, "headers": {"Retry-After": "7"}}])
    with pytest.raises(anthropic.RateLimitError) as info:
        if streamed:
            with client.messages.stream(model="m-limited", max_tokens=10, messages=HI) as stream:
                stream.get_final_message()
        else:
            client.messages.create(model="m-limited", max_tokens=10, messages=HI)
    assert info.value.body["error"]["type"] == "rate_limit_error"
    assert info.value.response.headers["retry-after"] == "7"


# --- count_tokens ----------------------------------------------------------------------


def test_count_tokens_answers_the_preflight_estimate(client, mock_upstream):
    before = mock_upstream.count("msg-openai")
    counted = client.messages.count_tokens(model="m-openai", system="Be brief.", messages=HI)
    # ceil((9 + 12) characters / 4) + 4 framing tokens for each of the two messages
    assert counted.input_tokens == 6 + 8
    longer = client.messages.count_tokens(model="m-openai", messages=[{"role": "user", "content": "x" * 400}])
    assert longer.input_tokens == 100 + 4
    assert mock_upstream.count("msg-openai") == before  # no upstream call


# --- validation: wrong types are a 400 naming the field, never a 500 -------------------

GOOD = {"model": "m-openai", "max_tokens": 10, "messages": HI}
FUZZ = [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"model": 7}, "model"),
    ({"messages": "hi"}, "messages"),
    ({"messages": None}, "messages"),
    ({"messages": [1]}, "messages[0]"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [7]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]}, "messages[0].content[0].source"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": {"a": 5}}]}]}, "messages[0].content[0].type"),
    (
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}]}]},
        "input",
    ),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 3}]}]}, "tool_use_id"),
    ({"system": 3}, "system"),
    ({"system": [{"type": "text", "text": 3}]}, "system[0].text"),
    ({"stream": "yes"}, "stream"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": False}, "top_p"),
    ({"top_k": 1.5}, "top_k"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"stop_sequences": [1]}, "stop_sequences[0]"),
    ({"metadata": "u"}, "metadata"),
    ({"metadata": {"user_id": 5}}, "metadata.user_id"),
    ({"tools": {"name": "f"}}, "tools"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": 3, "input_schema": {}}]}, "tools[0].name"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
]


@pytest.mark.parametrize(("patch", "field"), FUZZ, ids=[f for _, f in FUZZ])
def test_a_wrong_field_type_is_a_400_naming_it(gw, patch, field):
    body = {**GOOD, **patch}
    answer = httpx.post(f"{gw.url}/v1/messages", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert field in error["error"]["message"]


def test_a_body_that_is_not_json_is_an_anthropic_shaped_400(gw):
    answer = httpx.post(
        f"{gw.url}/v1/messages", content=b"{nope", headers={"x-api-key": gw.api_key, "anthropic-version": "2023-06-01"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_x_api_key_is_for_the_messages_paths_only(gw):
    chat = {"model": "m-openai", "messages": HI}
    answer = httpx.post(f"{gw.url}/v1/chat/completions", json=chat, headers={"x-api-key": gw.api_key}, timeout=20)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"  # OpenAI shape there


def test_count_tokens_checks_its_body_too(gw):
    answer = httpx.post(
        f"{gw.url}/v1/messages/count_tokens",
        json={"model": "m-openai", "messages": [{"role": "user", "content": 3}]},
        headers={"x-api-key": gw.api_key},
        timeout=20,
    )
    assert answer.status_code == 400 and "messages[0].content" in answer.json()["error"]["message"]


@pytest.mark.parametrize("endpoint", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_tool_input_nested_too_deep_is_a_400_naming_the_field(gw, endpoint):
    """The translation encodes tool inputs itself, so the depth check must come before it."""
    deep = orjson.loads('{"a":' * 300 + "1" + "}" * 300)
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": deep}
    turns = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": "y"},
    ]
    body = {"model": "m-openai", "max_tokens": 5, "messages": turns}
    answer = httpx.post(f"{gw.url}{endpoint}", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    assert answer.status_code == 400, answer.text
    assert "nested more than 254 levels" in answer.json()["error"]["message"]


@pytest.mark.parametrize("block_type", [["text"], {"a": 5}])
def test_count_tokens_names_a_block_type_that_is_not_a_string(gw, block_type):
    body = {"model": "m-openai", "messages": [{"role": "user", "content": [{"type": block_type, "text": "x"}]}]}
    answer = httpx.post(f"{gw.url}/v1/messages/count_tokens", json=body, headers={"x-api-key": gw.api_key}, timeout=20)
    assert answer.status_code == 400, answer.text
    assert "messages[0].content[0].type" in answer.json()["error"]["message"]


def test_an_idempotency_key_replays_the_anthropic_answer(gw, mock_upstream):
    headers = {"x-api-key": gw.api_key, "Idempotency-Key": f"msg-idem-{uuid.uuid4().hex}"}  # Redis outlives runs
    body = {"model": "m-openai", "max_tokens": 10, "messages": [{"role": "user", "content": "once"}]}
    before = mock_upstream.count("msg-openai")
    first = httpx.post(f"{gw.url}/v1/messages", json=body, headers=headers, timeout=20)
    second = httpx.post(f"{gw.url}/v1/messages", json=body, headers=headers, timeout=20)
    assert first.json()["type"] == "message" and second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert mock_upstream.count("msg-openai") == before + 1


def test_requests_are_counted_under_the_messages_endpoint(client, gw):
    labels = {"endpoint": "messages", "model": "m-openai", "model_used": "m-openai", "status": "200"}
    before = scrape(gw).value("switchboard_requests_total", **labels)
    client.messages.create(model="m-openai", max_tokens=10, messages=HI)
    wait_for(lambda: scrape(gw).value("switchboard_requests_total", **labels) == before + 1, 5, "the request metric")


def test_an_anthropic_upstreams_client_error_keeps_its_type_and_message(client, mock_upstream):
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}}
    mock_upstream.script("msg-claude", [{"status": 400, "body": orjson.dumps(refusal).decode()}])
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="m-claude", max_tokens=10, messages=HI)
    assert info.value.body["error"] == refusal["error"]
