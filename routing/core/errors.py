"""Failure classification and the gateway's error answers (CONTRACT §3, R2).

`UpstreamFailure` carries one upstream failure; its properties (`is_retryable`,
`is_provider_fault`, `fallback_trigger`, `fallback_reason`) are the single source
of truth for the retry loop, the fallback decision and the circuit breaker.
`GatewayError` is an answer the client sees, always in the OpenAI error shape.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import orjson


class FailureKind(enum.Enum):
    UPSTREAM_5XX = "upstream_5xx"
    UPSTREAM_429 = "upstream_429"
    UPSTREAM_408 = "upstream_408"
    UPSTREAM_4XX = "upstream_4xx"
    CONNECT_ERROR = "connect_error"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"
    EMPTY_STREAM = "empty_stream"
    STREAM_ERROR = "stream_error"
    INVALID_BODY = "invalid_body"
    CONTEXT_LENGTH = "context_length"
    CONTENT_FILTER = "content_filter"


K = FailureKind

RETRYABLE: frozenset[FailureKind] = frozenset(
    {
        K.UPSTREAM_5XX,
        K.UPSTREAM_429,
        K.UPSTREAM_408,
        K.CONNECT_ERROR,
        K.CONNECT_TIMEOUT,
        K.READ_TIMEOUT,
        K.FIRST_TOKEN_TIMEOUT,
        K.EMPTY_STREAM,
        K.STREAM_ERROR,
    }
)
# A 2xx with an unparseable body is the provider's fault (breaker) but is never
# retried or failed over: the upstream may already have billed it.
PROVIDER_FAULTS: frozenset[FailureKind] = RETRYABLE | {K.INVALID_BODY}
TIMEOUT_KINDS: frozenset[FailureKind] = frozenset(
    {K.CONNECT_TIMEOUT, K.READ_TIMEOUT, K.FIRST_TOKEN_TIMEOUT, K.UPSTREAM_408}
)

_TRIGGER: dict[FailureKind, str] = {
    K.UPSTREAM_5XX: "provider_error",
    K.CONNECT_ERROR: "provider_error",
    K.EMPTY_STREAM: "provider_error",
    K.STREAM_ERROR: "provider_error",
    K.UPSTREAM_429: "rate_limited",
    K.CONNECT_TIMEOUT: "timeout",
    K.READ_TIMEOUT: "timeout",
    K.FIRST_TOKEN_TIMEOUT: "timeout",
    K.UPSTREAM_408: "timeout",
    K.CONTEXT_LENGTH: "context_length",
    K.CONTENT_FILTER: "content_filter",
}

# X-Switchboard-Fallback values (CONTRACT §4).
_REASON: dict[FailureKind, str] = {
    K.UPSTREAM_5XX: "upstream_5xx",
    K.UPSTREAM_429: "upstream_429",
    K.CONNECT_TIMEOUT: "connect_timeout",
    K.CONNECT_ERROR: "connect_error",
    K.FIRST_TOKEN_TIMEOUT: "first_token_timeout",
    K.READ_TIMEOUT: "first_token_timeout",
    K.UPSTREAM_408: "first_token_timeout",
    K.EMPTY_STREAM: "empty_stream",
    K.STREAM_ERROR: "stream_error",
    K.CONTEXT_LENGTH: "context_length",
    K.CONTENT_FILTER: "content_filter",
}

# Bounded outcome labels for switchboard_upstream_attempts_total{outcome}.
_LABEL: dict[FailureKind, str] = {kind: kind.value for kind in FailureKind}


class GatewayError(Exception):
    """An error answer in the OpenAI shape with a stable `code` (CONTRACT §3)."""

    __slots__ = ("status", "code", "message", "type", "param", "headers", "error_object")

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        type: str = "invalid_request_error",  # noqa: A002  (the OpenAI field name)
        param: str | None = None,
        headers: dict[str, str] | None = None,
        error_object: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type
        self.param = param
        self.headers = headers
        self.error_object = error_object

    def error_dict(self) -> dict[str, Any]:
        if self.error_object is not None:
            return self.error_object
        return {"message": self.message, "type": self.type, "code": self.code, "param": self.param}

    def body(self) -> bytes:
        return orjson.dumps({"error": self.error_dict()})

    def __repr__(self) -> str:
        return f"GatewayError({self.status}, {self.code!r}, {self.message!r})"


class UpstreamFailure(Exception):
    """One failed upstream attempt, classified by `kind`."""

    __slots__ = ("kind", "message", "status", "retry_after_s", "body")

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        status: int | None = None,
        retry_after_s: float | None = None,
        body: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        self.body = body

    @property
    def is_retryable(self) -> bool:
        return self.kind in RETRYABLE

    @property
    def is_provider_fault(self) -> bool:
        """Counts against the circuit breaker (R5): retryable kinds plus invalid bodies."""
        return self.kind in PROVIDER_FAULTS

    @property
    def is_timeout(self) -> bool:
        return self.kind in TIMEOUT_KINDS

    @property
    def fallback_trigger(self) -> str | None:
        """The `fallback_on` entry that lets this failure move to the next link (R2)."""
        return _TRIGGER.get(self.kind)

    @property
    def fallback_reason(self) -> str | None:
        """The X-Switchboard-Fallback value when the next link serves."""
        return _REASON.get(self.kind)

    @property
    def label(self) -> str:
        """Outcome label for attempt metrics."""
        return _LABEL[self.kind]

    def to_gateway_error(self) -> GatewayError:
        """The answer when this failure ends the request on a single link (CONTRACT §3)."""
        kind = self.kind
        if kind in (K.UPSTREAM_5XX, K.CONNECT_ERROR, K.UPSTREAM_408, K.INVALID_BODY):
            return GatewayError(
                502,
                "upstream_error",
                f"The upstream provider failed: {self.message}. Retry later, or configure a fallback model.",
                type="upstream_error",
            )
        if kind is K.UPSTREAM_429:
            headers = None
            if self.retry_after_s is not None:
                headers = {"Retry-After": str(max(0, math.ceil(self.retry_after_s)))}
            return GatewayError(
                429,
                "upstream_rate_limited",
                f"The upstream provider is rate limiting requests: {self.message}. Retry after the Retry-After delay, or configure a fallback model.",
                type="rate_limit_error",
                headers=headers,
            )
        if kind is K.CONNECT_TIMEOUT:
            return GatewayError(
                504,
                "connect_timeout",
                f"Connecting to the upstream provider timed out: {self.message}. Retry later, or raise connect_timeout_ms.",
                type="timeout_error",
            )
        if kind in (K.FIRST_TOKEN_TIMEOUT, K.READ_TIMEOUT):
            return GatewayError(
                504,
                "first_token_timeout",
                f"The upstream provider did not answer in time: {self.message}. Retry later, or raise first_token_timeout_ms.",
                type="timeout_error",
            )
        if kind in (K.EMPTY_STREAM, K.STREAM_ERROR):
            return GatewayError(
                502,
                "upstream_stream_error",
                f"The upstream stream failed: {self.message}. Retry the request.",
                type="upstream_error",
            )
        return self._client_error()

    def _client_error(self) -> GatewayError:
        status = self.status if self.status is not None and 400 <= self.status < 500 else 400
        obj = _upstream_error_object(self.body)
        if obj is not None:
            obj = dict(obj)
            if obj.get("code") is None:
                obj["code"] = "upstream_client_error"
            return GatewayError(
                status,
                "upstream_client_error",
                str(obj.get("message") or self.message),
                type=str(obj.get("type") or "invalid_request_error"),
                error_object=obj,
            )
        return GatewayError(
            status,
            "upstream_client_error",
            f"The upstream provider rejected the request: {self.message}. Fix the request; it was not retried.",
        )

    def __repr__(self) -> str:
        return f"UpstreamFailure({self.kind.name}, {self.message!r}, status={self.status})"


def _upstream_error_object(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            return err
    return None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name) or headers.get(name.lower())
    if value is None:
        lname = name.lower()
        for key, val in headers.items():
            if key.lower() == lname:
                return val
    return value


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date relative to `now` epoch)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_PHRASES = (
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation", "responsibleaipolicyviolation"})
_FILTER_PHRASES = ("content_filter", "content_policy_violation", "content management policy", "content policy")


def _classify_4xx(body: bytes) -> tuple[FailureKind, str | None]:
    """Context-length and content-filter refusals among upstream 4xx (R2 opt-in triggers)."""
    obj = _upstream_error_object(body)
    if obj is not None:
        codes = []
        for key in ("code", "type"):
            val = obj.get(key)
            if isinstance(val, str):
                codes.append(val.lower())
        inner = obj.get("innererror")
        if isinstance(inner, dict) and isinstance(inner.get("code"), str):
            codes.append(inner["code"].lower())
        message = obj.get("message")
        text = message.lower() if isinstance(message, str) else ""
        detail = message if isinstance(message, str) else None
    else:
        codes = []
        text = body[:4096].decode("utf-8", "replace").lower() if body else ""
        detail = None
    if any(c in _CONTEXT_CODES for c in codes) or any(p in text for p in _CONTEXT_PHRASES):
        return K.CONTEXT_LENGTH, detail
    if any(c in _FILTER_CODES for c in codes) or any(p in text for p in _FILTER_PHRASES):
        return K.CONTENT_FILTER, detail
    return K.UPSTREAM_4XX, detail


def failure_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: float | Callable[[], float] | None = None,
) -> UpstreamFailure:
    """Classify a non-2xx upstream answer. `now` (epoch, or a clock) resolves HTTP-date Retry-After."""
    if status == 429 or status >= 500 or status < 400:
        now_s = now() if callable(now) else now
        retry_after = parse_retry_after(_header(headers, "Retry-After"), now_s)
        if status == 429:
            return UpstreamFailure(K.UPSTREAM_429, "upstream answered 429 Too Many Requests", status, retry_after, body)
        return UpstreamFailure(K.UPSTREAM_5XX, f"upstream answered HTTP {status}", status, retry_after, body)
    if status == 408:
        return UpstreamFailure(K.UPSTREAM_408, "upstream answered 408 Request Timeout", status, None, body)
    kind, detail = _classify_4xx(body)
    message = f"upstream answered HTTP {status}" + (f": {detail}" if detail else "")
    return UpstreamFailure(kind, message, status, None, body)


# --- the gateway's own errors (CONTRACT §3) ---------------------------------


def invalid_request(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, "invalid_request", message, param=param)


def model_required() -> GatewayError:
    return GatewayError(
        400,
        "model_required",
        "No model given: set `model` in the body, or give the agent a default model.",
        param="model",
    )


def request_too_large(limit_bytes: int) -> GatewayError:
    return GatewayError(
        413, "request_too_large", f"The request body is larger than {limit_bytes} bytes; send a smaller body."
    )


def invalid_api_key() -> GatewayError:
    return GatewayError(
        401,
        "invalid_api_key",
        "Missing, unknown, revoked or expired API key: send `Authorization: Bearer <key>` with a valid key.",
        type="authentication_error",
    )


def model_not_found(name: str) -> GatewayError:
    return GatewayError(
        404,
        "model_not_found",
        f"The model {name!r} does not exist: use a model id or alias listed by GET /v1/models.",
        type="not_found_error",
        param="model",
    )


def model_denied(name: str) -> GatewayError:
    return GatewayError(
        403,
        "model_denied",
        f"Your organisation's policy does not allow the model {name!r}: use a model listed by GET /v1/models.",
        type="permission_error",
        param="model",
    )


def unsupported_capability(model: str, capability: str) -> GatewayError:
    return GatewayError(
        400,
        "unsupported_capability",
        f"The model {model!r} (and its fallbacks) does not support {capability}: choose a model that declares it.",
        param="model",
    )


def context_length_exceeded(model: str, estimated_tokens: int | None = None, window: int | None = None) -> GatewayError:
    detail = (
        f" (about {estimated_tokens} tokens, window {window})"
        if estimated_tokens is not None and window is not None
        else ""
    )
    return GatewayError(
        400,
        "context_length_exceeded",
        f"The prompt is too long for {model!r} and every fallback{detail}: shorten the messages or use a model with a larger context window.",
        param="messages",
    )


def rate_limited(retry_after_s: float) -> GatewayError:
    seconds = max(1, math.ceil(retry_after_s))
    return GatewayError(
        429,
        "rate_limited",
        f"This API key is over its rate limit: retry in {seconds} s.",
        type="rate_limit_error",
        headers={"Retry-After": str(seconds)},
    )


def idempotency_stream_conflict() -> GatewayError:
    return GatewayError(
        400,
        "idempotency_stream_conflict",
        "Idempotency-Key cannot be used with a streaming request: drop the header or set stream to false.",
    )


def idempotency_key_reused() -> GatewayError:
    return GatewayError(
        409,
        "idempotency_key_reused",
        "This Idempotency-Key was already used with a different body: use a new key for a new request.",
    )


def circuit_open(model: str, retry_after_s: float) -> GatewayError:
    seconds = max(1, math.ceil(retry_after_s))
    return GatewayError(
        503,
        "circuit_open",
        f"The circuit breaker for {model!r} is open after repeated upstream failures and no fallback is left: retry in {seconds} s.",
        type="service_unavailable_error",
        headers={"Retry-After": str(seconds)},
    )


def upstream_unavailable(details: str) -> GatewayError:
    return GatewayError(
        503,
        "upstream_unavailable",
        f"Every model of the fallback chain failed ({details}). Retry later.",
        type="service_unavailable_error",
    )


def total_timeout(total_s: float | None = None) -> GatewayError:
    detail = f" of {total_s:g} s" if total_s is not None else ""
    return GatewayError(
        504,
        "total_timeout",
        f"The request's total deadline{detail} passed before an upstream answered: retry later, or raise total_timeout_ms.",
        type="timeout_error",
    )


# Header limits of the HTTP server (gateway_project/http_limits.py) ------------------


def headers_too_large(limit_bytes: int, limit_count: int) -> GatewayError:
    return GatewayError(
        431,
        "headers_too_large",
        f"The request line and headers exceed {limit_bytes} bytes or {limit_count} headers; "
        "send fewer or smaller headers.",
    )
