"""The gateway's error answers: the one catalogue (docs/errors.md).

`GatewayError` is an answer the client sees, always in the OpenAI error shape, and
every one is built by a factory below. Upstream failures and their classification
live in routing.core.failures, which maps each failure to one of these answers.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from routing.core.dimensions import BY_NAME
from routing.core.endpoints import listing


class GatewayError(Exception):
    """An error answer in the OpenAI shape with a stable `code` (docs/errors.md#the-table)."""

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


# --- the error catalogue (docs/errors.md) -------------------------------------
#
# Every error answer the gateway sends is built by one of the factories below;
# nothing else constructs a GatewayError. `CATALOGUE` fixes each code's status
# and `type`, so one code always has one status and one type.

INVALID_REQUEST_ERROR = "invalid_request_error"
AUTHENTICATION_ERROR = "authentication_error"
PERMISSION_ERROR = "permission_error"
NOT_FOUND_ERROR = "not_found_error"
RATE_LIMIT_ERROR = "rate_limit_error"
SERVER_ERROR = "server_error"
UPSTREAM_ERROR = "upstream_error"
SERVICE_UNAVAILABLE_ERROR = "service_unavailable_error"
TIMEOUT_ERROR = "timeout_error"

# The words of every failed token exchange (a Vertex AI service account's): the endpoint's host, port, path
# and the library's text go to the operators' log only (docs/security.md#urls).
TOKEN_EXCHANGE_FAILED = (
    "the provider's credentials could not be exchanged for an access token; the gateway operator's log has the detail"
)

# code -> (status, type). upstream_client_error's status is the upstream's 4xx
# (400 when the upstream sent a request-validation error as a 5xx); 400 is its default.
CATALOGUE: dict[str, tuple[int, str]] = {
    "invalid_request": (400, INVALID_REQUEST_ERROR),
    "model_required": (400, INVALID_REQUEST_ERROR),
    "request_too_large": (413, INVALID_REQUEST_ERROR),
    "request_body_timeout": (408, INVALID_REQUEST_ERROR),
    "invalid_api_key": (401, AUTHENTICATION_ERROR),
    "model_not_found": (404, NOT_FOUND_ERROR),
    "model_denied": (403, PERMISSION_ERROR),
    "unsupported_capability": (400, INVALID_REQUEST_ERROR),
    "context_length_exceeded": (400, INVALID_REQUEST_ERROR),
    "idempotency_stream_conflict": (400, INVALID_REQUEST_ERROR),
    "idempotency_key_reused": (409, INVALID_REQUEST_ERROR),
    "rate_limited": (429, RATE_LIMIT_ERROR),
    "upstream_client_error": (400, INVALID_REQUEST_ERROR),
    "upstream_error": (502, UPSTREAM_ERROR),
    "upstream_rate_limited": (429, RATE_LIMIT_ERROR),
    "upstream_unavailable": (503, SERVICE_UNAVAILABLE_ERROR),
    "circuit_open": (503, SERVICE_UNAVAILABLE_ERROR),
    "overloaded": (503, SERVICE_UNAVAILABLE_ERROR),
    "connect_timeout": (504, TIMEOUT_ERROR),
    "first_token_timeout": (504, TIMEOUT_ERROR),
    "total_timeout": (504, TIMEOUT_ERROR),
    "upstream_stream_error": (502, UPSTREAM_ERROR),
    "not_found": (404, NOT_FOUND_ERROR),
    "method_not_allowed": (405, INVALID_REQUEST_ERROR),
    "internal_error": (500, SERVER_ERROR),
    "headers_too_large": (431, INVALID_REQUEST_ERROR),
    # the management API (docs/management-api.md)
    "invalid_management_token": (401, AUTHENTICATION_ERROR),
    "permission_denied": (403, PERMISSION_ERROR),
    "forbidden": (403, PERMISSION_ERROR),
    "conflict": (409, INVALID_REQUEST_ERROR),
    "precondition_failed": (412, INVALID_REQUEST_ERROR),
}


def _error(
    code: str,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    status: int | None = None,
    error_object: dict[str, Any] | None = None,
) -> GatewayError:
    default_status, type_ = CATALOGUE[code]
    return GatewayError(
        default_status if status is None else status, code, message, type_, param, headers, error_object
    )


def _retry_after(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


# 400 invalid_request: the body itself is wrong.


def invalid_request(message: str, param: str | None = None) -> GatewayError:
    """A field of the body is wrong; `message` names it and says what to send instead."""
    return _error("invalid_request", message, param)


def invalid_json(detail: str) -> GatewayError:
    return _error("invalid_request", f"The request body is not valid JSON ({detail}). Send a JSON object.")


def body_not_object() -> GatewayError:
    return _error("invalid_request", "The request body must be a JSON object.")


def field_required(name: str) -> GatewayError:
    return _error("invalid_request", f"The field '{name}' is required.", name)


def field_wrong_type(name: str, expected: str) -> GatewayError:
    """`expected` reads after "must be", e.g. "an array"."""
    return _error("invalid_request", f"The field '{name}' must be {expected}.", name)


def model_not_string(got: str) -> GatewayError:
    return _error(
        "invalid_request",
        f"'model' must be a string, got {got}. Send the model id or alias as a string.",
        "model",
    )


def model_required(agent: str | None = None) -> GatewayError:
    who = f"agent '{agent}'" if agent else "the agent"
    return _error(
        "model_required",
        f"No 'model' in the request body and {who} has no default model. "
        "Send a model id or alias (GET /v1/models lists them), or set the agent's default_model.",
        "model",
    )


def request_too_large(limit_bytes: int) -> GatewayError:
    # the rest of the body is never read: the connection cannot carry another request
    return _error(
        "request_too_large",
        f"The request body is larger than {limit_bytes} bytes; send a smaller request.",
        headers={"Connection": "close"},
    )


def invalid_form(detail: str, param: str | None = None) -> GatewayError:
    """A multipart/form-data body that cannot be read (routing.gateway.multipart); `detail` says where."""
    return _error(
        "invalid_request",
        f"The multipart/form-data body is malformed: {detail}. Fix it and resend; nothing was sent upstream.",
        param,
    )


def form_part_too_large(name: str, limit_bytes: int) -> GatewayError:
    """One part of a form is over its bound (the whole body was within its own)."""
    return _error("request_too_large", f"The form part '{name}' is larger than {limit_bytes} bytes; send less.", name)


def form_too_many_parts(limit: int) -> GatewayError:
    return _error("request_too_large", f"The form has more than {limit} parts; send at most {limit}.")


def request_body_timeout(window_s: float, min_bytes: int) -> GatewayError:
    # the rest of the body is never read: the connection cannot carry another request
    return _error(
        "request_body_timeout",
        f"The request body arrived slower than {min_bytes} bytes per {window_s:g} s, the least the gateway "
        "waits for; send the whole body at once (or at least at that rate).",
        headers={"Connection": "close"},
    )


# 401 / 403 / 404: who is asking, and for what.


def missing_api_key() -> GatewayError:
    return _error("invalid_api_key", "Missing API key. Send 'Authorization: Bearer <key>'.")


def invalid_api_key() -> GatewayError:
    """An unknown or revoked key."""
    return _error(
        "invalid_api_key",
        "The API key is unknown or revoked. Check the key, or ask your administrator for a new one.",
    )


def expired_api_key(rotated: bool = False) -> GatewayError:
    """401: the key's `expires_at` has passed, or (`rotated`) the grace period of a rotated key's old secret."""
    if rotated:
        return _error(
            "invalid_api_key",
            "The API key has expired: it was rotated and its grace period is over. Use the new key.",
        )
    return _error("invalid_api_key", "The API key has expired. Ask your administrator for a new one.")


def disabled_api_key() -> GatewayError:
    """401: the key exists but an administrator disabled it (docs/limits.md#keys)."""
    return _error(
        "invalid_api_key", "The API key is disabled. Ask your administrator to enable it, or for another key."
    )


def key_model_denied(name: str) -> GatewayError:
    """403: the key's own allow-list (docs/limits.md#keys) does not list the model."""
    return _error(
        "model_denied",
        f"This API key may not use model '{name}': it is not in the key's list of models. "
        "Ask your administrator, or pick another model.",
        "model",
    )


def model_not_found(name: str) -> GatewayError:
    return _error(
        "model_not_found",
        f"The model '{name}' does not exist. GET /v1/models lists the models you may use.",
        "model",
    )


def model_denied(name: str) -> GatewayError:
    return _error(
        "model_denied",
        f"Your organisation's policy does not allow model '{name}'. "
        "Ask your administrator, or pick another model from GET /v1/models.",
        "model",
    )


ENDPOINTS = listing()  # the endpoint table's paths, by method (routing.core.endpoints)


def not_found_endpoint(path: str, endpoints: str = ENDPOINTS) -> GatewayError:
    shown = path if len(path) <= 200 else path[:200] + "..."
    return _error("not_found", f"No endpoint at {shown!r}. The endpoints are {endpoints}.")


def method_not_allowed(method: str, path: str, allowed: str) -> GatewayError:
    return _error("method_not_allowed", f"{method} is not allowed on {path}. Use {allowed} for {path}.")


# 400: what the chosen models cannot do.


def unsupported_capability(
    model: str, capability: str, hint: str | None = None, param: str | None = "model"
) -> GatewayError:
    """The model lacks `capability`; `hint` replaces the default advice."""
    advice = hint or f"pick a model whose capabilities include {capability}"
    return _error("unsupported_capability", f"model {model} does not support '{capability}'; {advice}.", param)


def no_servable_link(model: str) -> GatewayError:
    return _error(
        "unsupported_capability",
        f"No model of the chain of {model} can serve this request; pick another model (GET /v1/models).",
        "model",
    )


def max_output_exceeded(model: str, param: str, requested: int, limit: int | None) -> GatewayError:
    return _error(
        "unsupported_capability",
        f"{param} = {requested} is more than model {model} can produce "
        f"(max_output_tokens {limit}). Lower {param} or pick another model.",
        param,
    )


def dialect_cannot_serve(dialect: str, kind: str, model: str) -> GatewayError:
    return _error(
        "unsupported_capability",
        f"model {model!r} is served by a {dialect} provider, which cannot do {kind}; "
        "use a model whose provider supports it.",
        "model",
    )


def no_counterpart(param: str, model: str, dialect: str, protocol: str) -> GatewayError:
    """A field of a `protocol` request that the serving link's API cannot express (a translated link)."""
    return _error(
        "unsupported_capability",
        f"The field '{param}' has no counterpart on model {model!r}, whose {dialect} provider is reached by "
        f"translation; remove it, or pick a model whose provider speaks {protocol} itself.",
        param,
    )


def context_length_exceeded(
    model: str,
    estimated_tokens: int | None = None,
    window: int | None = None,
    param: str | None = "messages",
) -> GatewayError:
    size = (
        f"about {estimated_tokens} tokens, more than the {window}-token context window of model {model}"
        if estimated_tokens is not None and window is not None
        else f"too long for the context window of model {model}"
    )
    return _error(
        "context_length_exceeded",
        f"The prompt is {size}, and no fallback can take it. "
        "Shorten the prompt or pick a model with a larger context_window.",
        param,
    )


# Idempotency-Key and the caller's own limits.


def idempotency_stream_conflict() -> GatewayError:
    return _error(
        "idempotency_stream_conflict",
        'Idempotency-Key cannot be used with a streaming request; drop the header or send "stream": false.',
    )


def idempotency_key_reused() -> GatewayError:
    return _error(
        "idempotency_key_reused",
        "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
    )


def rate_limited(retry_after_s: float) -> GatewayError:
    headers = _retry_after(retry_after_s)
    return _error(
        "rate_limited",
        f"This API key is over its rate limit: retry in {headers['Retry-After']} s.",
        headers=headers,
    )


# The upstream's answer, when nothing is left to try (UpstreamFailure.to_gateway_error).


def upstream_client_error(
    detail: str, status: int | None = None, error_object: dict[str, Any] | None = None
) -> GatewayError:
    """The upstream refused the request; its own error object is relayed when it sent one.

    `status` is the upstream's status when it is a 4xx, else 400 (a request-validation
    error that the upstream sent as a 5xx, docs/errors.md#validation-5xx).
    """
    status = status if status is not None and 400 <= status < 500 else 400
    if error_object is not None:
        obj = dict(error_object)
        if obj.get("code") is None:
            obj["code"] = "upstream_client_error"
        return _error("upstream_client_error", str(obj.get("message") or detail), status=status, error_object=obj)
    return _error(
        "upstream_client_error",
        f"The upstream provider rejected the request: {detail}. Fix the request; it was not retried.",
        status=status,
    )


def upstream_error(detail: str) -> GatewayError:
    return _error(
        "upstream_error",
        f"The upstream provider failed: {detail}. Retry later, or configure a fallback model.",
    )


def upstream_rate_limited(detail: str, retry_after_s: float | None = None) -> GatewayError:
    headers = None if retry_after_s is None else {"Retry-After": str(max(0, math.ceil(retry_after_s)))}
    return _error(
        "upstream_rate_limited",
        f"The upstream provider is rate limiting requests: {detail}. "
        "Retry after the Retry-After delay, or configure a fallback model.",
        headers=headers,
    )


def connect_timeout(detail: str) -> GatewayError:
    return _error(
        "connect_timeout",
        f"Connecting to the upstream provider timed out: {detail}. Retry later, or raise connect_timeout_ms.",
    )


def first_token_timeout(detail: str) -> GatewayError:
    return _error(
        "first_token_timeout",
        f"The upstream provider did not answer in time: {detail}. Retry later, or raise first_token_timeout_ms.",
    )


def stream_idle_timeout(idle_s: float) -> GatewayError:
    """A committed stream went silent (sent in-stream, code first_token_timeout)."""
    return _error(
        "first_token_timeout",
        f"The upstream stream was silent for more than {idle_s:g} s. Retry the request, or raise stream_idle_timeout_ms.",
    )


def upstream_stream_error(detail: str) -> GatewayError:
    return _error("upstream_stream_error", f"The upstream stream failed: {detail}. Retry the request.")


# The chain as a whole.


def circuit_open(model: str, retry_after_s: float) -> GatewayError:
    headers = _retry_after(retry_after_s)
    return _error(
        "circuit_open",
        f"The circuit breaker for {model!r} is open after repeated upstream failures and no fallback is left: "
        f"retry in {headers['Retry-After']} s.",
        headers=headers,
    )


def upstream_unavailable(details: str) -> GatewayError:
    return _error("upstream_unavailable", f"Every model of the fallback chain failed ({details}). Retry later.")


def total_timeout(total_s: float | None = None, while_streaming: bool = False) -> GatewayError:
    detail = f" of {total_s:g} s" if total_s is not None else ""
    when = "while the answer was streaming" if while_streaming else "before an upstream answered"
    return _error(
        "total_timeout",
        f"The request's total deadline{detail} passed {when}: retry later, or raise total_timeout_ms.",
    )


def internal_error(request_id: str) -> GatewayError:
    return _error(
        "internal_error",
        f"The gateway failed unexpectedly; quote request id {request_id} to the operator.",
    )


# --- request shape at the edge (docs/request-validation.md) -------------------


def invalid_field(param: str | None, detail: str) -> GatewayError:
    """A body field of the wrong type, range or shape; `param` names it (`messages[0].role`)."""
    where = f"Invalid '{param}'" if param else "Invalid request body"
    return _error("invalid_request", f"{where}: {detail}. Fix it and resend; nothing was sent upstream.", param)


def nested_too_deep(limit: int, param: str | None = None) -> GatewayError:
    where = f" (in '{param}')" if param else ""
    return _error(
        "invalid_request",
        f"The request body is nested more than {limit} levels deep{where}; flatten it and resend.",
        param,
    )


def duplicate_authorization() -> GatewayError:
    return _error(
        "invalid_request",
        "The request has more than one Authorization header: send exactly one 'Authorization: Bearer <key>'.",
    )


# Header limits of the HTTP server (gateway_project/http_limits.py) ------------------


def headers_too_large(limit_bytes: int, limit_count: int) -> GatewayError:
    return _error(
        "headers_too_large",
        f"The request line and headers exceed {limit_bytes} bytes or {limit_count} headers; "
        "send fewer or smaller headers.",
    )


# --- per-agent and per-org rate limits (docs/limits.md) -----------------------


def rate_limit_exceeded(name: str, kind: str, limit: int, requested: int, retry_after_s: float) -> GatewayError:
    """429 `rate_limited`: the caller's own rpm/tpm bucket cannot take this request (nothing sent upstream).

    `name` says whose bucket ("agent 'acme/bot'", "org 'acme'"), `kind` is "requests"
    or "tokens", `limit` the per-minute limit, `requested` what this request needed.
    """
    headers = _retry_after(retry_after_s)
    per_minute = BY_NAME[kind].key if kind in BY_NAME else kind  # "rpm" for "requests" (routing.core.dimensions)
    if requested > limit:
        detail = (
            f"this request needs {requested} tokens (prompt estimate + max output), more than the {name} "
            f"may use per minute ({per_minute} {limit}): lower max_tokens or shorten the prompt"
        )
    else:
        detail = (
            f"the {name} is over its limit of {limit} {kind} per minute ({per_minute}): "
            f"retry in {headers['Retry-After']} s"
        )
    return _error("rate_limited", f"Rate limit reached: {detail}. Nothing was sent upstream.", headers=headers)


# --- per-agent and per-org spend budgets (docs/limits.md#budgets) ---------------

CATALOGUE["budget_exceeded"] = (402, "insufficient_quota")


def budget_exceeded(
    name: str, usd: float, spent: float, reserved: float, needed: float, period: str, resets_in_s: float | None
) -> GatewayError:
    """402 `budget_exceeded`: the worst-case cost of this request does not fit what the budget has left.

    `name` says whose budget ("agent 'acme/bot'", "org 'acme'"); `spent` and `reserved`
    are the period's settled spend and what requests in flight hold; `needed` is this
    request's worst case. `Retry-After` is the time to the period's end, when it ends.
    """
    left = max(0.0, usd - spent - reserved)
    amount = f"{usd:.2f}" if usd >= 1 else f"{usd:.6f}".rstrip("0")
    held = f", and requests in flight hold ${reserved:.4f} more" if reserved > 0 else ""
    when = f"this {period} (UTC)" if period != "total" else "in total"
    detail = (
        f"the {name} has spent ${spent:.4f} of its ${amount} budget {when}{held}; this request may cost up to "
        f"${needed:.6f} (prompt estimate and max output at the model's prices) and ${left:.6f} is left"
    )
    headers = None
    if resets_in_s is None:
        advice = "the budget does not reset (period: total): ask the operator to raise it"
    else:
        headers = _retry_after(resets_in_s)
        advice = (
            f"the budget resets in {headers['Retry-After']} s, at the start of the next {period}; lower max_tokens to fit what is "
            "left, wait for the reset, or ask the operator to raise the budget"
        )
    return _error(
        "budget_exceeded", f"Budget exceeded: {detail}. Nothing was sent upstream: {advice}.", headers=headers
    )


# --- deployments at capacity (docs/deployments.md#capacity) ---------------------


def deployments_at_capacity(model: str, retry_after_s: float) -> GatewayError:
    """429 `upstream_rate_limited`: every deployment of the chain that could serve is at its rpm/tpm.

    Nothing was sent upstream; Retry-After is when the soonest deployment has room again.
    """
    headers = _retry_after(retry_after_s)
    return _error(
        "upstream_rate_limited",
        f"Every deployment of {model!r} is at its configured capacity (rpm/tpm) and no fallback can take the "
        f"request: nothing was sent upstream; retry in {headers['Retry-After']} s, or raise the deployments' "
        "rpm/tpm.",
        headers=headers,
    )


def overloaded(name: str, retry_after_s: float, priority: str = "default", reason: str = "deadline") -> GatewayError:
    """503 `overloaded` (docs/overload.md): the request could not start before its deadline.

    Nothing was sent upstream; Retry-After is from the queue's drain rate.
    """
    headers = _retry_after(retry_after_s)
    why = {
        "deadline": "could not start before its deadline (its total timeout or X-Switchboard-Max-Wait)",
        "queue_full": "found the waiting queue full of requests of its priority or higher",
    }.get(reason, reason)
    return _error(
        "overloaded",
        f"{name!r} is at its concurrency limit and this {priority} request {why}: nothing was sent upstream; "
        f"retry in {headers['Retry-After']} s, or send it with a longer X-Switchboard-Max-Wait.",
        headers=headers,
    )


# The management API (docs/management-api.md): the same shape and catalogue as /v1.


def invalid_management_token(detail: str) -> GatewayError:
    """401: no, an unknown, a revoked or an expired management token (gateway API keys are never accepted here)."""
    return _error(
        "invalid_management_token",
        f"{detail} The management API takes a management token ('Authorization: Bearer sbm-...'), created by a "
        "superuser in the admin or with 'manage.py create_management_token'; gateway API keys are not accepted.",
    )


def permission_denied(detail: str) -> GatewayError:
    """403: the token's scope (read-only, or limited to one org) does not cover this request."""
    return _error("permission_denied", f"{detail} Ask a superuser for a token with that scope.")


def forbidden(detail: str, param: str | None = None) -> GatewayError:
    """403: the caller may write to this org, but not this change: an org-scoped token (or user) reaching past
    the org's own bounds (docs/security.md#management-tokens-and-org-scope); `param` names the field."""
    return _error(
        "forbidden",
        f"{detail} Only an operator who manages the org itself (a superuser, or a management token without an "
        "org) can grant more.",
        param,
    )


def resource_not_found(name: str) -> GatewayError:
    """404 on the management API: no such object (or one outside the token's org)."""
    return _error("not_found", f"{name} does not exist. List the collection to find its id.")


def conflict(message: str) -> GatewayError:
    """409: the write collides with an existing object (a name already taken)."""
    return _error("conflict", message)


def precondition_failed(name: str) -> GatewayError:
    """412: If-Match named an ETag that is no longer the object's: someone else changed it meanwhile."""
    return _error(
        "precondition_failed",
        f"{name} was changed since you read it (If-Match does not match its ETag). GET it again, re-apply your "
        "change and send the new ETag.",
    )
