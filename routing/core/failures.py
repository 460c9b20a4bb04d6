"""Upstream failure classification (docs/resilience.md#r2, docs/errors.md).

`UpstreamFailure` carries one failed upstream attempt, classified by `FailureKind`; its
properties (`is_retryable`, `is_provider_fault`, `charges_link`, `fallback_trigger`,
`fallback_reason`) are the single source of truth for the retry loop, the fallback
decision and the circuit breaker. `failure_from_response` classifies a non-2xx answer
once, at the boundary; `to_gateway_error` maps a failure to its answer in the error
catalogue (routing.core.errors), which knows nothing of failures.
"""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from routing.core.errors import (
    GatewayError,
    connect_timeout,
    first_token_timeout,
    upstream_client_error,
    upstream_error,
    upstream_rate_limited,
    upstream_stream_error,
)


class FailureKind(enum.Enum):
    UPSTREAM_5XX = "upstream_5xx"
    UPSTREAM_429 = "upstream_429"
    UPSTREAM_408 = "upstream_408"
    UPSTREAM_4XX = "upstream_4xx"
    # A 5xx whose body is a request-validation error: the caller's fault (docs/errors.md#validation-5xx).
    UPSTREAM_INVALID_REQUEST = "upstream_invalid_request"
    CONNECT_ERROR = "connect_error"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"
    EMPTY_STREAM = "empty_stream"
    STREAM_ERROR = "stream_error"
    INVALID_BODY = "invalid_body"
    CONTEXT_LENGTH = "context_length"
    CONTENT_FILTER = "content_filter"
    # Out of quota or credit until a reset (docs/errors.md#upstream): never retried, the deployment parked.
    QUOTA_EXHAUSTED = "quota_exhausted"
    # The provider refused the gateway's credentials: an operator's fix, never retried; the link marked misconfigured.
    AUTHENTICATION = "authentication"


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
# Failures no request body can cause: they charge a link's shared breaker whoever sent them
# (docs/resilience.md#org-views). Statuses only the upstream's own front sends (gateway, proxy,
# load balancer, Anthropic's 529 overload) join them in `charges_link`.
LINK_KINDS: frozenset[FailureKind] = frozenset(
    {K.CONNECT_ERROR, K.CONNECT_TIMEOUT, K.READ_TIMEOUT, K.FIRST_TOKEN_TIMEOUT}
)
LINK_STATUSES: frozenset[int] = frozenset({502, 503, 504, 529})
# Error types/codes (or message words) of a 429 or 5xx saying the provider as a whole is
# overloaded or out of capacity, not that this caller sent too much.
_OVERLOAD_CODES = frozenset(
    {
        "overloaded_error",
        "overloaded",
        "server_overloaded",
        "engine_overloaded",
        "server_busy",
        "service_unavailable",
        "service_unavailable_error",
        "capacity_exceeded",
    }
)
_OVERLOAD_PHRASES = ("overloaded", "over capacity", "out of capacity", "currently unavailable")

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
    K.QUOTA_EXHAUSTED: "rate_limited",
    K.AUTHENTICATION: "provider_error",
}

# X-Switchboard-Fallback values (docs/errors.md#how-upstream-failures-are-classified).
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
    K.QUOTA_EXHAUSTED: "quota_exhausted",
    K.AUTHENTICATION: "authentication",
}

# Bounded outcome labels for switchboard_upstream_attempts_total{outcome}.
_LABEL: dict[FailureKind, str] = {kind: kind.value for kind in FailureKind}


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
    def charges_link(self) -> bool:
        """A fault no request body can cause: it charges the link's shared breaker at once,
        whichever organisation sent the request (docs/resilience.md#org-views). The rest
        (a plain 500, an unparsable error, a broken stream) goes through per-org attribution."""
        kind = self.kind
        if kind in LINK_KINDS:
            return True
        if kind is K.UPSTREAM_5XX:
            return self.status in LINK_STATUSES or _says_overloaded(self.body)
        if kind is K.UPSTREAM_429:
            return _says_overloaded(self.body)
        return False

    @property
    def is_capacity(self) -> bool:
        """The upstream says it is past its capacity right now: a plain 429 (a quota or credit refusal is
        QUOTA_EXHAUSTED, a kind of its own), Anthropic's 529, or a 503 whose error says overloaded. Under
        an adaptive concurrency limit it is a signal to the limit, not a breaker failure
        (docs/resilience.md#capacity); elsewhere it is classified as its kind says."""
        kind = self.kind
        if kind is K.UPSTREAM_429:
            return True
        if kind is K.UPSTREAM_5XX:
            return self.status == 529 or (self.status == 503 and _says_overloaded(self.body))
        return False

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
        """The answer when this failure ends the request on a single link (docs/errors.md)."""
        kind = self.kind
        if kind in (K.UPSTREAM_5XX, K.CONNECT_ERROR, K.UPSTREAM_408, K.INVALID_BODY):
            return upstream_error(self.message)
        if kind is K.UPSTREAM_429 or kind is K.QUOTA_EXHAUSTED:
            return upstream_rate_limited(self.message, self.retry_after_s)
        if kind is K.CONNECT_TIMEOUT:
            return connect_timeout(self.message)
        if kind in (K.FIRST_TOKEN_TIMEOUT, K.READ_TIMEOUT):
            return first_token_timeout(self.message)
        if kind in (K.EMPTY_STREAM, K.STREAM_ERROR):
            return upstream_stream_error(self.message)
        return upstream_client_error(self.message, self.status, _upstream_error_object(self.body))

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


def _says_overloaded(body: bytes | None) -> bool:
    """The upstream's error object says the provider is overloaded (Anthropic `overloaded_error`, ...)."""
    obj = _upstream_error_object(body)
    if obj is None:
        return False
    for key in ("type", "code"):
        val = obj.get(key)
        if isinstance(val, str) and val.lower() in _OVERLOAD_CODES:
            return True
    message = obj.get("message")
    return isinstance(message, str) and any(p in message.lower() for p in _OVERLOAD_PHRASES)


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


def _retry_after_ms(headers: Mapping[str, str]) -> float | None:
    """Azure OpenAI's `retry-after-ms` (milliseconds, finer than Retry-After), as seconds."""
    value = _header(headers, "retry-after-ms")
    if not value:
        return None
    try:
        ms = float(value.strip())
    except ValueError:
        return None
    if math.isnan(ms) or math.isinf(ms):
        return None
    return max(0.0, ms / 1000.0)


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


# What request-validation errors look like when a server sends them as a 5xx
# (llama-cpp-python, some vLLM/TGI versions): matched only in a JSON body.
_VALIDATION_TYPES = frozenset(
    {
        "invalid_request_error",
        "invalid_request",
        "validation_error",
        "request_validation_error",
        "badrequesterror",
        "bad_request",
        "bad_request_error",
        "unprocessable_entity",
        "validation",
        "400",
        "422",
    }
)
_VALIDATION_MESSAGE = re.compile(r"\b\d+ validation errors?\b|\binput validation error\b", re.IGNORECASE)


def _is_validation_detail(detail: Any) -> bool:
    """FastAPI/pydantic's 422 body: `{"detail": [{"loc": [...], "msg": ..., "type": ...}, ...]}`."""
    return (
        isinstance(detail, list)
        and bool(detail)
        and all(isinstance(item, dict) and "loc" in item and "msg" in item for item in detail)
    )


def _validation_rejection(body: bytes) -> tuple[FailureKind, str] | None:
    """(kind, detail) when a 5xx body says the request was invalid, else None (a provider fault).

    Conservative on purpose: only a JSON body that names a validation error counts; a
    plain "Internal Server Error", a non-JSON body or an error object without such a
    marker stays a provider fault. A prompt too long or a content refusal keeps its own
    kind, so the opt-in `context_length` / `content_filter` fallbacks still apply.
    """
    if not body:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    detail: str | None = None
    if _is_validation_detail(data.get("detail")):
        first = data["detail"][0]
        detail = f"{first.get('msg')} at {first.get('loc')}"
    elif str(data.get("error_type", "")).lower() == "validation":  # TGI
        detail = str(data.get("error") or "validation error")
    else:
        obj = data if data.get("object") == "error" else _upstream_error_object(body)  # vLLM's or OpenAI's
        if obj is None:
            return None
        markers = [str(obj.get(key)).lower() for key in ("type", "code") if obj.get(key) is not None]
        message = obj.get("message")
        text = message if isinstance(message, str) else ""
        if any(m in _VALIDATION_TYPES for m in markers) or _VALIDATION_MESSAGE.search(text):
            detail = " ".join(text.split())[:200] or "invalid request"
    if detail is None:
        return None
    kind, _ = _classify_4xx(body)
    if kind is K.UPSTREAM_4XX:
        kind = K.UPSTREAM_INVALID_REQUEST
    return kind, detail


def failure_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: float | Callable[[], float] | None = None,
) -> UpstreamFailure:
    """Classify a non-2xx upstream answer. `now` (epoch, or a clock) resolves HTTP-date Retry-After."""
    if status >= 500:
        rejected = _validation_rejection(body)
        if rejected is not None:
            kind, detail = rejected
            return UpstreamFailure(
                kind, f"upstream answered HTTP {status} to an invalid request: {detail}", status, None, body
            )
    if status == 429 or status >= 500 or status < 400:
        now_s = now() if callable(now) else now
        retry_after = _retry_after_ms(headers)
        if retry_after is None:
            retry_after = parse_retry_after(_header(headers, "Retry-After"), now_s)
        if status == 429:
            return UpstreamFailure(K.UPSTREAM_429, "upstream answered 429 Too Many Requests", status, retry_after, body)
        return UpstreamFailure(K.UPSTREAM_5XX, f"upstream answered HTTP {status}", status, retry_after, body)
    if status == 408:
        return UpstreamFailure(K.UPSTREAM_408, "upstream answered 408 Request Timeout", status, None, body)
    kind, detail = _classify_4xx(body)
    message = f"upstream answered HTTP {status}" + (f": {detail}" if detail else "")
    return UpstreamFailure(kind, message, status, None, body)
