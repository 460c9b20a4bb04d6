"""AWS Bedrock (Converse / ConverseStream) behind the OpenAI chat shape, against the mock's Bedrock runtime.

The mock checks every SigV4 signature with botocore's signer from what it received, so
these tests fail when the gateway signs the wrong path, body, headers or token.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from routing.config.validation import bedrock_region_problem, validate_document
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.runtime.observe import health
from routing.upstream.dialects import get_dialect
from routing.upstream.dialects.bedrock import credentials_of, endpoint_of, sign, wire_url
from tests.upstream.conftest import model, provider, sse_payloads
from tools.mock import bedrock as mock_bedrock

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
TEMPORARY = "ASIAMOCKSWITCHBOARD:{}:{}".format(*mock_bedrock.CREDENTIALS["ASIAMOCKSWITCHBOARD"])
LONG_TERM = "AKIAMOCKSWITCHBOARD:" + mock_bedrock.CREDENTIALS["AKIAMOCKSWITCHBOARD"][0]
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
HI = [{"role": "user", "content": "Hello"}]
DIALECT = get_dialect("bedrock")
BASE = "http://127.0.0.1:9/bedrock?region=us-east-1"


def spec_at(mock, upstream: str = MODEL_ID, region: str = "us-east-1"):
    return model(upstream, provider(dialect="bedrock", base_url=f"{mock.root}/bedrock?region={region}"))


async def send(transport, spec, body, key=TEMPORARY, stream=False, payload=None):
    """One upstream call as the gateway makes it; `payload` replaces the signed body (tampering)."""
    prepared = DIALECT.build_request("chat", body, spec, spec.provider.base_url, key, stream)
    resp = await transport.send(spec.provider, "POST", prepared.url, prepared.headers, payload or prepared.body, 2.0)
    return prepared, resp


async def call(transport, spec, body, key=TEMPORARY):
    prepared, resp = await send(transport, spec, body, key)
    try:
        data = await resp.read()
    finally:
        await resp.close()
    if resp.status != 200:
        raise DIALECT.failure(resp.status, resp.headers, data)
    return DIALECT.parse_response("chat", data, spec, prepared.context)


async def stream_bytes(transport, spec, body, key=TEMPORARY) -> bytes:
    _, resp = await send(transport, spec, body, key, stream=True)
    out = bytearray()
    try:
        assert resp.status == 200, await resp.read()
        assert resp.headers["Content-Type"] == mock_bedrock.EVENTSTREAM
        async for chunk in DIALECT.translate_stream(resp.iter_chunks(), spec):
            out += chunk
    finally:
        await resp.close()
    return bytes(out)


def last(mock, name: str = MODEL_ID) -> dict:
    return mock.state.calls(name)["requests"][-1]


async def script(mock, name: str, *steps: dict) -> None:
    mock.state.model(name).steps.extend(steps)


# --- the mock's eventstream encoder, checked by botocore's decoder -------------------------


def test_the_mocks_eventstream_frames_decode_with_botocore():
    frames = mock_bedrock.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hé"}})
    frames += mock_bedrock.exception("throttlingException", "slow down")
    buffer = EventStreamBuffer()
    buffer.add_data(frames[:7])  # split anywhere: nothing until a whole message arrived
    assert list(buffer) == []
    buffer.add_data(frames[7:])
    first, second = list(buffer)
    assert first.headers == {
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert orjson.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "hé"}}
    assert (second.headers[":message-type"], second.headers[":exception-type"]) == ("exception", "throttlingException")
    corrupt = bytearray(mock_bedrock.event("messageStop", {"stopReason": "end_turn"}))
    corrupt[-6] ^= 1  # one payload bit: the message CRC no longer matches
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(corrupt))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


# --- requests and signatures ------------------------------------------------------------


async def test_a_chat_request_becomes_a_signed_converse_request(mock, transport):
    spec = spec_at(mock)
    body = {
        "model": "public",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "x"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "42"},
        ],
        "max_tokens": 64,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "tools": TOOLS,
        "tool_choice": "required",
    }
    parsed = await call(transport, spec, body)
    got = last(mock)
    assert got["path"] == f"/bedrock/model/{MODEL_ID}/converse"
    assert got["body"] == {
        "system": [{"text": "Be brief."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"text": "What is this?"},
                    {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}},
                ],
            },
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t1", "name": "lookup", "input": {"query": "x"}}}],
            },
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "42"}]}}]},
        ],
        "inferenceConfig": {"maxTokens": 64, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "lookup",
                        "description": "Look something up",
                        "inputSchema": {"json": TOOLS[0]["function"]["parameters"]},
                    }
                }
            ],
            "toolChoice": {"any": {}},
        },
    }
    headers = got["headers"]
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=ASIAMOCKSWITCHBOARD/")
    assert "/us-east-1/bedrock/aws4_request" in headers["Authorization"]
    assert "x-amz-content-sha256;x-amz-date;x-amz-security-token" in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] == mock_bedrock.CREDENTIALS["ASIAMOCKSWITCHBOARD"][1]
    raw = orjson.dumps(got["body"])
    assert headers["X-Amz-Content-SHA256"] == hashlib.sha256(raw).hexdigest()
    answer = orjson.loads(parsed.body)
    assert answer["choices"][0]["message"]["content"] == mock_bedrock.TEXT
    assert parsed.usage == mock_bedrock.USAGE


async def test_a_model_id_that_is_an_arn_is_one_signed_path_segment(mock, transport):
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet"
    parsed = await call(transport, spec_at(mock, arn), {"messages": HI}, key=LONG_TERM)
    assert parsed.usage == mock_bedrock.USAGE
    assert mock.state.calls(arn)["count"] == 1


@pytest.mark.parametrize(
    ("key", "error_type"),
    [
        (
            "ASIAMOCKSWITCHBOARD:wrong-secret:" + mock_bedrock.CREDENTIALS["ASIAMOCKSWITCHBOARD"][1],
            "InvalidSignatureException",
        ),
        ("ASIAMOCKSWITCHBOARD:" + mock_bedrock.CREDENTIALS["ASIAMOCKSWITCHBOARD"][0], "UnrecognizedClientException"),
        ("AKIAUNKNOWN:whatever", "UnrecognizedClientException"),
    ],
    ids=["wrong-secret", "missing-session-token", "unknown-key"],
)
async def test_bad_credentials_are_refused_by_the_mock_as_a_client_error(mock, transport, key, error_type):
    with pytest.raises(UpstreamFailure) as caught:
        await call(transport, spec_at(mock), {"messages": HI}, key=key)
    failure = caught.value
    assert (failure.kind, failure.status) == (FailureKind.UPSTREAM_4XX, 403)
    assert not failure.is_provider_fault and not failure.is_retryable
    error = failure.to_gateway_error()
    assert (error.status, error.code, error.error_dict()["type"]) == (403, "upstream_client_error", error_type)
    if error_type == "InvalidSignatureException":
        assert error.message.startswith("The request signature we calculated does not match")


async def test_the_body_hash_and_the_signed_body_are_checked(mock, transport):
    spec = spec_at(mock)
    prepared, resp = await send(
        transport,
        spec,
        {"messages": HI},
        payload=orjson.dumps({"messages": [{"role": "user", "content": [{"text": "Other"}]}]}),
    )
    assert resp.status == 403
    assert resp.headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")
    await resp.close()
    # A body hash header that matches the tampered body still fails: the signature covers the original.
    tampered = orjson.dumps({"messages": []})
    headers = {**prepared.headers, "X-Amz-Content-SHA256": hashlib.sha256(tampered).hexdigest()}
    resp = await transport.send(spec.provider, "POST", prepared.url, headers, tampered, 2.0)
    assert resp.status == 403 and b"signature we calculated does not match" in await resp.read()
    await resp.close()
    assert mock.state.calls(MODEL_ID)["count"] == 2


def test_a_signature_from_botocore_verifies_and_one_changed_byte_does_not():
    url = wire_url("http://127.0.0.1:1/bedrock", MODEL_ID, False)
    headers = sign("POST", url, b"{}", credentials_of(TEMPORARY), "us-east-1", "127.0.0.1:1")
    assert url.endswith("/model/anthropic.claude-3-haiku-20240307-v1:0/converse")
    assert credentials_of("a:b:c") == ("a", "b", "c") and credentials_of("a:b") == ("a", "b", None)
    assert credentials_of("only-one-part") is None and credentials_of("a::c") is None
    assert "Signature=" in headers["Authorization"]


# --- answers, streams and errors ----------------------------------------------------------


async def test_a_tool_call_comes_back_as_an_openai_tool_call(mock, transport):
    parsed = await call(transport, spec_at(mock), {"messages": HI, "tools": TOOLS})
    choice = orjson.loads(parsed.body)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {"id": "tooluse_mock1", "type": "function", "function": {"name": "lookup", "arguments": '{"query":"mock"}'}}
    ]


async def test_tool_choice_none_sends_no_tools(mock, transport):
    await call(transport, spec_at(mock), {"messages": HI, "tools": TOOLS, "tool_choice": "none"})
    assert "toolConfig" not in last(mock)["body"]


async def test_an_image_url_is_refused_with_a_clear_error(mock, transport):
    body = {
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]
    }
    with pytest.raises(Exception, match="base64 data: URIs"):
        await call(transport, spec_at(mock), body)


def test_a_content_part_bedrock_cannot_take_is_refused_without_naming_another_provider(mock):
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(GatewayError) as caught:
        DIALECT.build_request(
            "chat", {"messages": [{"role": "user", "content": [audio]}]}, spec_at(mock), BASE, LONG_TERM, False
        )
    assert caught.value.status == 400 and caught.value.param == "messages[0].content[0]"
    assert "input_audio" in caught.value.message and "Anthropic" not in caught.value.message


async def test_a_stream_becomes_openai_chunks_with_usage_and_done(mock, transport):
    raw = await stream_bytes(transport, spec_at(mock), {"messages": HI, "tools": TOOLS})
    payloads = sse_payloads(raw)
    assert payloads[-1] == b"[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "tok0 tok1 tok2 "
    calls = [call for d in deltas for call in d.get("tool_calls") or ()]
    assert calls[0]["id"] == "tooluse_mock1" and calls[0]["function"]["name"] == "lookup"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"query": "mock"}'
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}


async def test_an_exception_before_any_content_is_raised_classified(mock, transport):
    await script(
        mock, MODEL_ID, {"stream_exception": "throttlingException"}, {"stream_exception": "validationException"}
    )
    with pytest.raises(UpstreamFailure) as throttled:
        await stream_bytes(transport, spec_at(mock), {"messages": HI})
    assert throttled.value.kind is FailureKind.UPSTREAM_429
    with pytest.raises(UpstreamFailure) as invalid:
        await stream_bytes(transport, spec_at(mock), {"messages": HI})
    assert invalid.value.kind is FailureKind.UPSTREAM_4XX and not invalid.value.is_provider_fault


async def test_an_exception_after_content_ends_the_stream_with_an_error_frame(mock, transport):
    await script(mock, MODEL_ID, {"stream_exception": "internalServerException", "exception_after": 2})
    payloads = sse_payloads(await stream_bytes(transport, spec_at(mock), {"messages": HI}))
    assert b"[DONE]" not in payloads
    error = orjson.loads(payloads[-1])["error"]
    assert (error["type"], error["code"]) == ("internalServerException", "upstream_stream_error")


async def test_a_stream_without_metadata_still_ends_after_message_stop(mock, transport):
    await script(mock, MODEL_ID, {"no_usage": True}, {"no_done": True})
    assert sse_payloads(await stream_bytes(transport, spec_at(mock), {"messages": HI}))[-1] == b"[DONE]"
    assert b"[DONE]" not in await stream_bytes(transport, spec_at(mock), {"messages": HI})


@pytest.mark.parametrize(
    ("exception", "kind", "provider_fault"),
    [
        ("ThrottlingException", FailureKind.UPSTREAM_429, True),
        ("ValidationException", FailureKind.UPSTREAM_4XX, False),
        ("AccessDeniedException", FailureKind.UPSTREAM_4XX, False),
        ("ServiceUnavailableException", FailureKind.UPSTREAM_5XX, True),
        ("InternalServerException", FailureKind.UPSTREAM_5XX, True),
        ("ModelNotReadyException", FailureKind.UPSTREAM_5XX, True),
    ],
)
async def test_bedrock_errors_are_classified(mock, transport, exception, kind, provider_fault):
    await script(mock, MODEL_ID, {"exception": exception})
    with pytest.raises(UpstreamFailure) as caught:
        await call(transport, spec_at(mock), {"messages": HI})
    assert caught.value.kind is kind
    assert caught.value.is_provider_fault is provider_fault
    assert caught.value.is_retryable is provider_fault


async def test_a_prompt_too_long_is_a_context_length_refusal(mock, transport):
    await script(
        mock, MODEL_ID, {"exception": "ValidationException", "message": "Input is too long for requested model."}
    )
    with pytest.raises(UpstreamFailure) as caught:
        await call(transport, spec_at(mock), {"messages": HI})
    assert caught.value.kind is FailureKind.CONTEXT_LENGTH


async def test_without_credentials_nothing_is_sent(mock, transport):
    with pytest.raises(UpstreamFailure) as caught:
        DIALECT.build_request("chat", {"messages": HI}, spec_at(mock), spec_at(mock).provider.base_url, None, False)
    assert not caught.value.is_provider_fault and "ACCESS_KEY_ID:SECRET_ACCESS_KEY" in caught.value.message


# --- configuration ------------------------------------------------------------------------


def test_the_region_comes_from_the_aws_host_or_the_region_parameter():
    assert endpoint_of("https://bedrock-runtime.eu-west-3.amazonaws.com").region == "eu-west-3"
    assert endpoint_of("http://127.0.0.1:9/bedrock?region=us-west-2") == (
        "http://127.0.0.1:9/bedrock",
        "us-west-2",
        "127.0.0.1:9",
    )
    assert endpoint_of("https://bedrock-runtime.us-east-1.amazonaws.com:443").host == (
        "bedrock-runtime.us-east-1.amazonaws.com"
    )
    assert bedrock_region_problem("https://proxy.example.com/bedrock") is not None
    assert bedrock_region_problem("http://h/?region=not a region") is not None


def test_validation_refuses_a_bedrock_provider_without_a_region():
    doc = {"providers": [{"name": "b", "dialect": "bedrock", "base_url": "https://proxy.example.com"}]}
    errors = validate_document(doc)
    assert [e.path for e in errors] == ["providers[b].base_url"]
    assert "?region=" in errors[0].message
    doc["providers"][0]["base_url"] = "https://bedrock-runtime.us-east-1.amazonaws.com"
    assert validate_document(doc) == []


async def translate(frames: list[bytes]) -> bytes:
    async def chunks() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    out = bytearray()
    async for piece in DIALECT.translate_stream(chunks(), model(MODEL_ID, provider(dialect="bedrock"))):
        out += piece
    return bytes(out)


async def test_a_malformed_eventstream_ends_with_an_error_frame():
    good = mock_bedrock.event("messageStart", {"role": "assistant"})
    delta = mock_bedrock.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}})
    out = await translate([good, delta, b"\x00\x00\x00\x10garbage-garbage!"])
    assert orjson.loads(sse_payloads(out)[-1])["error"]["type"] == "invalid_stream"


async def test_the_health_probe_is_signed_so_a_wrong_secret_shows_as_down(mock):
    good = provider(dialect="bedrock", base_url=f"{mock.root}/bedrock?region=us-east-1", api_key=TEMPORARY)
    bad = provider(dialect="bedrock", base_url=good.base_url, api_key="ASIAMOCKSWITCHBOARD:wrong:token")
    assert health.health_url(good) == f"{mock.root}/bedrock/async-invoke?maxResults=1"
    headers = health.health_headers(good)
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=ASIAMOCKSWITCHBOARD/")
    assert headers["X-Amz-Security-Token"] == mock_bedrock.CREDENTIALS["ASIAMOCKSWITCHBOARD"][1]
    async with httpx.AsyncClient() as client:
        up = await health.probe_provider(good, client, 2.0)
        down = await health.probe_provider(bad, client, 2.0)
    assert (up.status, down.status) == ("up", "down")
    assert "refused the credentials" in down.detail
