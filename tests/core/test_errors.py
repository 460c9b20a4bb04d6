"""Failure classification and error answers (CONTRACT §3, R2)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import orjson
import pytest

from routing.core import errors
from routing.core.errors import FailureKind as K
from routing.core.errors import GatewayError, UpstreamFailure, failure_from_response, parse_retry_after

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
NOT_RETRYABLE = [K.UPSTREAM_4XX, K.INVALID_BODY, K.CONTEXT_LENGTH, K.CONTENT_FILTER]


@pytest.mark.parametrize("kind", RETRYABLE)
def test_retryable_kinds_are_retried_and_charge_the_breaker(kind: K) -> None:
    f = UpstreamFailure(kind, "x")
    assert f.is_retryable
    assert f.is_provider_fault


@pytest.mark.parametrize("kind", NOT_RETRYABLE)
def test_non_retryable_kinds(kind: K) -> None:
    f = UpstreamFailure(kind, "x")
    assert not f.is_retryable
    assert f.is_provider_fault is (kind is K.INVALID_BODY)


@pytest.mark.parametrize(
    ("kind", "trigger", "reason"),
    [
        (K.UPSTREAM_5XX, "provider_error", "upstream_5xx"),
        (K.CONNECT_ERROR, "provider_error", "connect_error"),
        (K.EMPTY_STREAM, "provider_error", "empty_stream"),
        (K.STREAM_ERROR, "provider_error", "stream_error"),
        (K.UPSTREAM_429, "rate_limited", "upstream_429"),
        (K.CONNECT_TIMEOUT, "timeout", "connect_timeout"),
        (K.READ_TIMEOUT, "timeout", "first_token_timeout"),
        (K.FIRST_TOKEN_TIMEOUT, "timeout", "first_token_timeout"),
        (K.UPSTREAM_408, "timeout", "first_token_timeout"),
        (K.CONTEXT_LENGTH, "context_length", "context_length"),
        (K.CONTENT_FILTER, "content_filter", "content_filter"),
        (K.UPSTREAM_4XX, None, None),
        (K.INVALID_BODY, None, None),
    ],
)
def test_fallback_trigger_and_reason(kind: K, trigger: str | None, reason: str | None) -> None:
    f = UpstreamFailure(kind, "x")
    assert f.fallback_trigger == trigger
    assert f.fallback_reason == reason


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        (K.UPSTREAM_5XX, 502, "upstream_error"),
        (K.CONNECT_ERROR, 502, "upstream_error"),
        (K.UPSTREAM_408, 502, "upstream_error"),
        (K.INVALID_BODY, 502, "upstream_error"),
        (K.UPSTREAM_429, 429, "upstream_rate_limited"),
        (K.CONNECT_TIMEOUT, 504, "connect_timeout"),
        (K.READ_TIMEOUT, 504, "first_token_timeout"),
        (K.FIRST_TOKEN_TIMEOUT, 504, "first_token_timeout"),
        (K.EMPTY_STREAM, 502, "upstream_stream_error"),
        (K.STREAM_ERROR, 502, "upstream_stream_error"),
    ],
)
def test_single_link_errors(kind: K, status: int, code: str) -> None:
    err = UpstreamFailure(kind, "boom", status=503 if kind is K.UPSTREAM_5XX else None).to_gateway_error()
    assert (err.status, err.code) == (status, code)
    body = orjson.loads(err.body())
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert body["error"]["code"] == code
    assert "boom" in body["error"]["message"]


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
        (302, K.UPSTREAM_5XX),
    ],
)
def test_status_classification(status: int, kind: K) -> None:
    assert failure_from_response(status, {}, b"{}").kind is kind


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
