"""Failure classification and error answers, against docs/errors.md."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import orjson
import pytest

from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind as K
from routing.core.failures import UpstreamFailure, failure_from_response, parse_retry_after
from tests.core.error_table import rows

TABLE = rows()

# docs/errors.md#how-upstream-failures-are-classified: what is retried and charged to the breaker. R6 makes a stream
# error before the commit point a retryable pre-commit failure like an empty stream.
RETRYABLE = [
    K.UPSTREAM_5XX,
    K.UPSTREAM_429,
    K.UPSTREAM_408,
    K.CONNECT_ERROR,
    K.CONNECT_TIMEOUT,
    K.READ_TIMEOUT,
    K.FIRST_TOKEN_TIMEOUT,
    K.EMPTY_STREAM,
    K.STREAM_ERROR,
]
# A client-caused 4xx is never retried nor charged; a 2xx with a body that is not JSON is
# charged but never retried (docs/errors.md#the-table, upstream_error).
CHARGED_NOT_RETRIED = [K.INVALID_BODY]
# Out of quota or credit: not retried, not charged, the deployment parked (docs/errors.md#upstream).
CLIENT_CAUSED = [
    K.UPSTREAM_4XX,
    K.CONTEXT_LENGTH,
    K.CONTENT_FILTER,
    K.UPSTREAM_INVALID_REQUEST,
    K.QUOTA_EXHAUSTED,
    K.AUTHENTICATION,  # the operator's fix: never retried, the breaker untouched, the link marked misconfigured
]


def test_every_failure_kind_has_a_documented_rule() -> None:
    assert set(RETRYABLE) | set(CHARGED_NOT_RETRIED) | set(CLIENT_CAUSED) == set(K)


@pytest.mark.parametrize("kind", RETRYABLE)
def test_retryable_kinds_are_retried_and_charge_the_breaker(kind: K) -> None:
    f = UpstreamFailure(kind, "x")
    assert f.is_retryable
    assert f.is_provider_fault


def test_an_unparseable_2xx_body_charges_the_breaker_but_is_never_retried() -> None:
    f = UpstreamFailure(K.INVALID_BODY, "x")
    assert (f.is_retryable, f.is_provider_fault, f.fallback_trigger) == (False, True, None)


@pytest.mark.parametrize("kind", CLIENT_CAUSED)
def test_client_caused_failures_are_neither_retried_nor_charged(kind: K) -> None:
    f = UpstreamFailure(kind, "x")
    assert not f.is_retryable
    assert not f.is_provider_fault


# (kind, fallback_on trigger, X-Switchboard-Fallback reason), as R2 and the response
# headers' reason list state them.
DOCUMENTED_FALLBACKS = [
    (K.UPSTREAM_5XX, "provider_error", "upstream_5xx"),
    (K.CONNECT_ERROR, "provider_error", "connect_error"),
    (K.EMPTY_STREAM, "provider_error", "empty_stream"),
    (K.STREAM_ERROR, "provider_error", "stream_error"),
    (K.UPSTREAM_429, "rate_limited", "upstream_429"),
    (K.CONNECT_TIMEOUT, "timeout", "connect_timeout"),
    (K.FIRST_TOKEN_TIMEOUT, "timeout", "first_token_timeout"),
    (K.READ_TIMEOUT, "timeout", "first_token_timeout"),  # non-streaming: no complete answer in time
    (K.CONTEXT_LENGTH, "context_length", "context_length"),
    (K.CONTENT_FILTER, "content_filter", "content_filter"),
    (K.UPSTREAM_4XX, None, None),
    (K.INVALID_BODY, None, None),
]
# Project decisions, docs/errors.md#project-decisions and #validation-5xx.
DECIDED_FALLBACKS = [
    (K.UPSTREAM_408, "timeout", "first_token_timeout"),
    (K.UPSTREAM_INVALID_REQUEST, None, None),
    (K.QUOTA_EXHAUSTED, "rate_limited", "quota_exhausted"),  # docs/errors.md#upstream
    (K.AUTHENTICATION, "provider_error", "authentication"),
]


@pytest.mark.parametrize(("kind", "trigger", "reason"), DOCUMENTED_FALLBACKS)
def test_fallback_trigger_and_reason(kind: K, trigger: str | None, reason: str | None) -> None:
    f = UpstreamFailure(kind, "x")
    assert f.fallback_trigger == trigger
    assert f.fallback_reason == reason


@pytest.mark.parametrize(("kind", "trigger", "reason"), DECIDED_FALLBACKS)
def test_documented_decision_fallback_trigger_and_reason(kind: K, trigger: str | None, reason: str | None) -> None:
    f = UpstreamFailure(kind, "x")
    assert (f.fallback_trigger, f.fallback_reason) == (trigger, reason)


# The code a failure ends the request with when nothing is left to try, by the rows of
# docs/errors.md#the-table; the status comes from that table.
DOCUMENTED_FINAL_CODES = [
    (K.UPSTREAM_5XX, "upstream_error"),
    (K.CONNECT_ERROR, "upstream_error"),
    (K.INVALID_BODY, "upstream_error"),
    (K.UPSTREAM_429, "upstream_rate_limited"),
    (K.CONNECT_TIMEOUT, "connect_timeout"),
    (K.READ_TIMEOUT, "first_token_timeout"),
    (K.FIRST_TOKEN_TIMEOUT, "first_token_timeout"),
    (K.EMPTY_STREAM, "upstream_stream_error"),
    (K.STREAM_ERROR, "upstream_stream_error"),
]


@pytest.mark.parametrize(("kind", "code"), DOCUMENTED_FINAL_CODES)
def test_single_link_errors(kind: K, code: str) -> None:
    err = UpstreamFailure(kind, "boom", status=503 if kind is K.UPSTREAM_5XX else None).to_gateway_error()
    row = TABLE[code]
    assert (err.status, err.code) == (row.status, code)
    body = orjson.loads(err.body())
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert (body["error"]["code"], body["error"]["type"]) == (code, row.type)
    assert "boom" in body["error"]["message"]


def test_documented_decision_upstream_408_with_nothing_left_is_upstream_error() -> None:
    err = failure_from_response(408, {}, b"").to_gateway_error()
    assert (err.status, err.code) == (TABLE["upstream_error"].status, "upstream_error")


def test_429_carries_upstream_retry_after_in_whole_seconds() -> None:
    f = failure_from_response(429, {"retry-after": "2.2"}, b"")
    err = f.to_gateway_error()
    assert err.status == 429
    assert err.headers == {"Retry-After": "3"}
    assert failure_from_response(429, {}, b"").to_gateway_error().headers is None


def test_4xx_keeps_upstream_error_object_and_status() -> None:
    upstream = {
        "error": {
            "message": "bad temperature",
            "type": "invalid_request_error",
            "code": "bad_temp",
            "param": "temperature",
        }
    }
    f = failure_from_response(422, {}, orjson.dumps(upstream))
    assert f.kind is K.UPSTREAM_4XX
    err = f.to_gateway_error()
    assert err.status == 422
    assert err.code == "upstream_client_error"
    assert orjson.loads(err.body()) == upstream


def test_4xx_error_object_without_code_gets_ours() -> None:
    upstream = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: required"}}
    err = failure_from_response(400, {}, orjson.dumps(upstream)).to_gateway_error()
    body = orjson.loads(err.body())["error"]
    assert body["message"] == "max_tokens: required"
    assert body["type"] == "invalid_request_error"
    assert body["code"] == "upstream_client_error"


def test_4xx_without_json_gets_our_shape() -> None:
    err = failure_from_response(401, {}, b"<html>nope</html>").to_gateway_error()
    assert err.status == 401
    body = orjson.loads(err.body())["error"]
    assert body["code"] == "upstream_client_error"
    assert body["param"] is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}',
        b'{"error": {"message": "This model\'s maximum context length is 8192 tokens."}}',
        b'{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}',
        b'{"error": "Too many tokens in the request"}',
        b"prompt is too long",
    ],
)
def test_context_length_detection(body: bytes) -> None:
    f = failure_from_response(400, {}, body)
    assert f.kind is K.CONTEXT_LENGTH
    assert f.fallback_trigger == "context_length"
    err = f.to_gateway_error()
    assert (err.status, err.code) == (400, "upstream_client_error")


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "filtered", "code": "content_filter"}}',
        b'{"error": {"message": "refused", "type": "content_policy_violation"}}',
        b'{"error": {"message": "x", "code": "bad", "innererror": {"code": "ResponsibleAIPolicyViolation"}}}',
    ],
)
def test_content_filter_detection(body: bytes) -> None:
    f = failure_from_response(400, {}, body)
    assert f.kind is K.CONTENT_FILTER
    assert f.fallback_reason == "content_filter"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (500, K.UPSTREAM_5XX),
        (503, K.UPSTREAM_5XX),
        (429, K.UPSTREAM_429),
        (408, K.UPSTREAM_408),
        (400, K.UPSTREAM_4XX),
        (404, K.UPSTREAM_4XX),
    ],
)
def test_status_classification(status: int, kind: K) -> None:
    assert failure_from_response(status, {}, b"{}").kind is kind


@pytest.mark.parametrize("status", [301, 302, 101])
def test_documented_decision_a_non_4xx_non_2xx_answer_is_a_provider_fault(status: int) -> None:
    f = failure_from_response(status, {}, b"")
    assert f.kind is K.UPSTREAM_5XX and f.is_provider_fault


def test_retry_after_seconds_and_http_date() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    date = format_datetime(datetime(2025, 1, 1, 12, 0, 7, tzinfo=UTC), usegmt=True)
    assert parse_retry_after("5", now) == 5.0
    assert parse_retry_after(date, now) == pytest.approx(7.0)
    assert parse_retry_after(date, now + 60) == 0.0  # a date in the past means now
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    f = failure_from_response(503, {"Retry-After": date}, b"", now=lambda: now)
    assert f.retry_after_s == pytest.approx(7.0)


def test_retry_after_header_lookup_is_case_insensitive() -> None:
    assert failure_from_response(429, {"RETRY-AFTER": "4"}, b"").retry_after_s == 4.0


def test_gateway_error_body_shape() -> None:
    err = errors.invalid_request("`messages` must be a list", param="messages")
    assert err.status == 400
    assert orjson.loads(err.body()) == {
        "error": {
            "message": "`messages` must be a list",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "messages",
        }
    }
    assert isinstance(err, GatewayError)


def test_circuit_open_retry_after_rounds_up() -> None:
    err = errors.circuit_open("chat-a", 12.01)
    assert (err.status, err.code, err.headers) == (503, "circuit_open", {"Retry-After": "13"})


# docs/errors.md#validation-5xx: a 5xx whose body says the request failed validation.
LLAMA_CPP_500 = (
    b"{\"error\":{\"message\":\"1 validation error:\\n  {'type': 'list_type', 'loc': ('body', 'messages'), "
    b"'msg': 'Input should be a valid list', 'input': 'hi'}\\n\\n  File \\\"VENV/lib/python3.11/site-packages/"
    b'llama_cpp/server/app.py\\", line 376, in create_chat_completion\\n    POST /v1/chat/completions",'
    b'"type":"internal_server_error","param":null,"code":null}}'
)
VALIDATION_5XX = [
    pytest.param(500, LLAMA_CPP_500, id="llama-cpp-python"),
    pytest.param(
        500,
        b'{"detail":[{"loc":["body","messages"],"msg":"Field required","type":"missing"}]}',
        id="fastapi-detail-list",
    ),
    pytest.param(
        500, b'{"error":{"message":"bad messages","type":"invalid_request_error","code":null}}', id="openai-type"
    ),
    pytest.param(500, b'{"error":{"message":"bad role","type":"BadRequestError","code":400}}', id="vllm"),
    pytest.param(503, b'{"object":"error","message":"bad role","type":"BadRequestError","code":400}', id="vllm-old"),
    pytest.param(
        500, b'{"type":"error","error":{"type":"invalid_request_error","message":"messages: required"}}', id="anthropic"
    ),
    pytest.param(500, b'{"error":"Input validation error: `inputs` is empty","error_type":"validation"}', id="tgi"),
    pytest.param(500, b'{"error":{"message":"2 validation errors for ChatRequest","type":"server_error"}}', id="count"),
]
PROVIDER_5XX = [
    pytest.param(500, b"Internal Server Error", id="plain-text"),
    pytest.param(500, b"<html><h1>500 Internal Server Error</h1></html>", id="html"),
    pytest.param(500, b"", id="empty"),
    pytest.param(500, b'{"detail":"Internal Server Error"}', id="fastapi-string-detail"),
    pytest.param(
        500, b'{"error":{"message":"Internal server error","type":"internal_server_error","code":null}}', id="openai"
    ),
    pytest.param(503, b'{"error":{"message":"mock upstream failure","type":"server_error"}}', id="server-error"),
    pytest.param(529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', id="overloaded"),
    pytest.param(500, b'{"detail":[{"msg":"no loc"}]}', id="detail-without-loc"),
    pytest.param(502, b"[1, 2]", id="json-list"),
]


@pytest.mark.parametrize(("status", "body"), VALIDATION_5XX)
def test_a_5xx_validation_error_is_the_callers_fault(status: int, body: bytes) -> None:
    f = failure_from_response(status, {"Retry-After": "5"}, body)
    assert f.kind is K.UPSTREAM_INVALID_REQUEST
    assert (f.is_retryable, f.is_provider_fault, f.fallback_trigger) == (False, False, None)
    err = f.to_gateway_error()
    assert (err.status, err.code) == (400, "upstream_client_error")
    answer = orjson.loads(err.body())["error"]
    upstream = orjson.loads(body).get("error")
    if isinstance(upstream, dict):  # the upstream's own error object is relayed, with our code if it had none
        assert answer["message"] == upstream["message"]
        assert answer["code"] == (upstream.get("code") or "upstream_client_error")
    else:
        assert answer["code"] == "upstream_client_error" and answer["type"] == "invalid_request_error"


@pytest.mark.parametrize(("status", "body"), PROVIDER_5XX)
def test_a_plain_5xx_stays_a_provider_fault(status: int, body: bytes) -> None:
    f = failure_from_response(status, {}, body)
    assert f.kind is K.UPSTREAM_5XX and f.is_provider_fault and f.is_retryable
    assert f.to_gateway_error().code == "upstream_error"


def test_a_5xx_validation_error_saying_the_prompt_is_too_long_keeps_its_opt_in_fallback() -> None:
    body = b'{"error":{"message":"This model\'s maximum context length is 8192 tokens","type":"invalid_request_error"}}'
    f = failure_from_response(500, {}, body)
    assert f.kind is K.CONTEXT_LENGTH and not f.is_provider_fault


# docs/resilience.md#org-views: which provider faults charge a link's shared breaker whoever
# sent them (no request body can cause them), and which are attributed to the sender's org.
ANTHROPIC_OVERLOADED = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'


@pytest.mark.parametrize(
    ("status", "body", "charges_link"),
    [
        pytest.param(500, b"Internal Server Error", False, id="plain-500-attributed"),
        pytest.param(500, b'{"error": {"message": "boom", "type": "server_error"}}', False, id="500-json-attributed"),
        pytest.param(500, b"\x00not json", False, id="unparsable-500-attributed"),
        pytest.param(502, b"Bad Gateway", True, id="502"),
        pytest.param(503, b"", True, id="503"),
        pytest.param(504, b"<html>Gateway Timeout</html>", True, id="504"),
        pytest.param(529, ANTHROPIC_OVERLOADED, True, id="anthropic-529"),
        pytest.param(500, ANTHROPIC_OVERLOADED, True, id="overloaded-error-in-a-500"),
        pytest.param(
            429,
            b'{"error": {"message": "Rate limit reached for requests", "type": "requests"}}',
            False,
            id="429-of-the-caller-attributed",
        ),
        pytest.param(
            429,
            b'{"error": {"message": "The engine is currently overloaded", "type": "server_error"}}',
            True,
            id="429-provider-overloaded",
        ),
        pytest.param(429, ANTHROPIC_OVERLOADED, True, id="429-overloaded-error"),
    ],
)
def test_which_answers_charge_the_link_whoever_sent_them(status: int, body: bytes, charges_link: bool) -> None:
    assert failure_from_response(status, {}, body).charges_link is charges_link


@pytest.mark.parametrize("kind", [K.CONNECT_ERROR, K.CONNECT_TIMEOUT, K.FIRST_TOKEN_TIMEOUT, K.READ_TIMEOUT])
def test_transport_failures_charge_the_link_whoever_sent_them(kind: K) -> None:
    assert UpstreamFailure(kind, "x").charges_link


@pytest.mark.parametrize("kind", [K.EMPTY_STREAM, K.STREAM_ERROR, K.INVALID_BODY, K.UPSTREAM_408])
def test_failures_a_body_may_cause_are_attributed(kind: K) -> None:
    assert not UpstreamFailure(kind, "x").charges_link
