"""The gateway's own HTTP API as an OpenAPI 3.1 document, served at `GET /v1/openapi.json` (docs/api.md#openapi).

Built once, on the first request for it, from the endpoint table (routing.core.endpoints:
one operation per row, its body described by routing.gateway.body_schemas.COMPONENTS), the
error catalogue (routing.core.errors CATALOGUE: every code with its status and type) and the
lists below; the request
path pays one string comparison for it. Request and answer bodies are described by
their main fields and left open (`additionalProperties`), because the gateway passes
unknown fields through to the upstream and back.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from routing.core.compact import compact
from routing.core.endpoints import ENDPOINTS, MULTIPART
from routing.core.errors import CATALOGUE
from routing.core.failures import _REASON
from routing.gateway.body_schemas import COMPONENTS

PATH = "/v1/openapi.json"
VERSION = "1.0.0"

# What each error code means to a client; every code of CATALOGUE needs one (the test checks).
ERROR_MEANINGS: dict[str, str] = {
    "invalid_request": "The body is not JSON, not an object, or a field has the wrong type (`param` names it).",
    "model_required": "No model in the body and the agent has no default model.",
    "request_too_large": "The body is over the size limit.",
    "request_body_timeout": "The body came slower than the least progress the gateway waits for (bytes per window).",
    "invalid_api_key": "The key is missing, unknown, revoked or expired.",
    "model_not_found": "No model or alias with that id exists.",
    "model_denied": "The organisation's policy denies the model.",
    "unsupported_capability": "The model does not declare what the request needs (endpoint, streaming, tools, "
    "structured output, modality).",
    "context_length_exceeded": "The estimated prompt exceeds the context window of every link of the chain.",
    "idempotency_stream_conflict": "An Idempotency-Key header on a streaming request.",
    "idempotency_key_reused": "The Idempotency-Key was used before with a different body.",
    "rate_limited": "The agent's or org's own request or token rate limit; see Retry-After.",
    "budget_exceeded": "The org's or agent's spend budget for the period is used up; Retry-After = until the "
    "period resets, when it does.",
    "overloaded": "The request could not start before its deadline under overload, or was shed for its priority.",
    "quota_exhausted": "Every link is parked because its provider reported the account's quota exhausted.",
    "upstream_client_error": "An upstream 4xx other than 408/429, returned at once with the upstream's status "
    "(never retried, never failed over).",
    "upstream_error": "Upstream 5xx, transport error or invalid JSON and nothing left to try.",
    "upstream_rate_limited": "Upstream 429 (or every deployment at capacity) and nothing left to try.",
    "upstream_unavailable": "Every link of the chain was tried or skipped and failed; the message lists each.",
    "circuit_open": "The breaker of the requested model is open and no fallback is left; see Retry-After.",
    "connect_timeout": "Connecting to the upstream exceeded the connect timeout and nothing is left to try.",
    "first_token_timeout": "No first byte within the first-token timeout and nothing left to try.",
    "total_timeout": "The request's total deadline (retries and fallbacks included) passed.",
    "upstream_stream_error": "The upstream stream ended empty, broke, or ended without its terminator "
    '(in-stream: one terminal `data: {"error": ...}` frame).',
    "not_found": "No endpoint at that path; the message lists the endpoints.",
    "method_not_allowed": "The method is not allowed on that path; the message names the one that is.",
    "internal_error": "A bug in the gateway; the message carries the request id to report.",
    "headers_too_large": "The request headers are over the size or count limit.",
    # the management API's codes (docs/management-api.md), in the one catalogue; /v1 never sends them
    "invalid_management_token": "Management API only: no, an unknown or a revoked management token.",
    "permission_denied": "Management API only: the token is read-only or limited to another org.",
    "forbidden": "Management API: an org-limited token reaching past its org's bounds (`param` names the field); "
    "`GET /metrics` without a staff session when it is not public.",
    "conflict": "Management API only: the object to create exists already.",
    "precondition_failed": "Management API only: If-Match names an ETag that is no longer the object's.",
}

_HEADERS: dict[str, tuple[str, str]] = {  # name: (schema type, description)
    "X-Request-Id": ("string", "The client's X-Request-Id (sanitised, at most 128 characters), else a new one."),
    "X-Switchboard-Model-Used": ("string", "The model id that served, after alias resolution and fallback."),
    "X-Switchboard-Provider-Used": ("string", "That model's provider name."),
    "X-Switchboard-Upstream-Model": (
        "string",
        "That model's name at its upstream; the answer's `model` is the id the client asked for.",
    ),
    "X-Switchboard-Dropped": (
        "string",
        "A request served by translation: the hints the link could not carry, named (e.g. thinking, seed, user).",
    ),
    "X-Switchboard-Attempts": ("integer", "Upstream attempts made, retries and fallbacks included."),
    "X-Switchboard-Cache": ("string", "On models with a response cache: hit, miss or bypass."),
    "X-Switchboard-Fallback": ("string", "Only when a fallback served: why the link before it was left."),
    "x-ratelimit-limit-requests": (
        "integer",
        "The tightest request limit per minute that applies (agents or orgs with limits only).",
    ),
    "x-ratelimit-remaining-requests": ("integer", "Requests left of that limit."),
    "x-ratelimit-reset-requests": ("string", "Until that limit is full again, e.g. 1s."),
    "x-ratelimit-limit-tokens": ("integer", "The tightest token limit per minute that applies."),
    "x-ratelimit-remaining-tokens": ("integer", "Tokens left of that limit."),
    "x-ratelimit-reset-tokens": ("string", "Until that limit is full again."),
}
_HEADER_ENUMS = {"X-Switchboard-Cache": ["hit", "miss", "bypass"]}

# The path parameter of /v1/models/{model}.
_MODEL_PARAMETER = {
    "name": "model",
    "in": "path",
    "required": True,
    "description": "A model id or alias (may contain `/`).",
    "schema": {"type": "string"},
}


def _headers() -> dict[str, Any]:
    out = {}
    for name, (kind, text) in _HEADERS.items():
        schema: dict[str, Any] = {"type": kind}
        if name in _HEADER_ENUMS:
            schema["enum"] = _HEADER_ENUMS[name]
        if name == "X-Switchboard-Fallback":
            schema["enum"] = sorted({*_REASON.values(), "circuit_open", "unsupported_capability"})
        out[name] = {"description": text, "schema": schema}
    out["Retry-After"] = {
        "description": "Whole seconds to wait (429, 402, 503 answers that know).",
        "schema": {"type": "integer"},
    }
    return out


def _error_components() -> dict[str, Any]:
    codes = list(CATALOGUE)
    listing = "\n".join(f"- `{c}` ({CATALOGUE[c][0]}, {CATALOGUE[c][1]}): {ERROR_MEANINGS.get(c, '')}" for c in codes)
    return {
        "ErrorCode": {"type": "string", "enum": codes, "description": "Stable error codes:\n" + listing},
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type", "code"],
                    "properties": {
                        "message": {"type": "string", "description": "What went wrong and what to do."},
                        "type": {"type": "string", "enum": sorted({t for _, t in CATALOGUE.values()})},
                        "code": {"$ref": "#/components/schemas/ErrorCode"},
                        "param": {"type": ["string", "null"], "description": "The request field at fault."},
                    },
                }
            },
        },
    }


def _status_responses(streams: bool) -> dict[str, Any]:
    """The statuses an endpoint may answer, each with the error body and the codes it carries."""
    by_status: dict[int, list[str]] = {}
    for code, (status, _) in CATALOGUE.items():
        by_status.setdefault(status, []).append(code)
    ok_content: dict[str, Any] = {"application/json": {"schema": {"$ref": "#/components/schemas/OpenObject"}}}
    if streams:
        ok_content["text/event-stream"] = {
            "schema": {
                "type": "string",
                "description": "Server-sent events relayed from the upstream as sent; an "
                'error after the stream began is one terminal `data: {"error": {...}}` frame.',
            }
        }
    headers = {name: {"$ref": f"#/components/headers/{name}"} for name in (*_HEADERS, "Retry-After")}
    responses: dict[str, Any] = {"200": {"description": "The answer.", "headers": headers, "content": ok_content}}
    for status in sorted(by_status):
        responses[str(status)] = {
            "description": "Error codes: " + ", ".join(f"`{c}`" for c in by_status[status]),
            "headers": headers,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    responses["4XX"] = {
        "description": "`upstream_client_error`: the upstream's own 4xx status and error object.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return responses


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for row in ENDPOINTS:  # one operation per endpoint row
        operation: dict[str, Any] = {
            "operationId": row.operation_id,
            "summary": row.summary,
            "security": [{"bearer": []}],
            "parameters": [{"$ref": "#/components/parameters/XRequestId"}],
            "responses": _status_responses(row.streams),
        }
        if row.priced_by:  # what the call is charged by: the usage record's cost (docs/usage-records.md)
            operation["x-switchboard-priced-by"] = row.priced_by
        if row.reader is not None:
            media = "multipart/form-data" if row.reader == MULTIPART else "application/json"
            operation["requestBody"] = {
                "required": True,
                "content": {media: {"schema": {"$ref": f"#/components/schemas/{row.schema or 'OpenObject'}"}}},
            }
            operation["parameters"].append({"$ref": "#/components/parameters/IdempotencyKey"})
        if "{model}" in row.path:
            operation["parameters"].append(_MODEL_PARAMETER)
        paths.setdefault(row.path, {})[row.method.lower()] = operation
    paths["/health"] = {
        "get": {
            "operationId": "health",
            "summary": "Liveness; no I/O at all.",
            "security": [],
            "responses": {
                "200": {
                    "description": '{"status": "ok"}',
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenObject"}}},
                }
            },
        }
    }
    paths["/health/providers"] = {
        "get": {
            "operationId": "healthProviders",
            "summary": "The last probe result of every provider.",
            "security": [],
            "responses": {
                "200": {
                    "description": '{"providers": [{"name", "status", "latency_ms", "checked_at", "detail"}]}',
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenObject"}}},
                }
            },
        }
    }
    paths[PATH] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "security": [],
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenObject"}}},
                }
            },
        }
    }
    return paths


def _schemas() -> dict[str, Any]:
    """The open object, every request body an endpoint row names (routing.gateway.body_schemas.COMPONENTS)
    and the error shape."""
    return {"OpenObject": {"type": "object", "additionalProperties": True}, **COMPONENTS, **_error_components()}


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document as a dict."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Switchboard gateway API",
            "version": VERSION,
            "description": "OpenAI-compatible endpoints and Anthropic's Messages API, with the gateway's own "
            'error codes and headers. Every error is JSON: {"error": {"message", "type", "code", '
            '"param"}} (on /v1/messages in Anthropic\'s shape).',
        },
        "servers": [{"url": "/"}],
        "paths": _paths(),
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer <key> (on /v1/messages also "
                    "x-api-key). Keys are shown once at creation.",
                }
            },
            "parameters": {
                "XRequestId": {
                    "name": "X-Request-Id",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 128},
                },
                "IdempotencyKey": {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "Non-streaming requests only.",
                },
            },
            "headers": _headers(),
            "schemas": _schemas(),
        },
    }


@functools.cache
def body() -> bytes:
    """The document as JSON bytes, built on first use and kept: it depends on the code alone (the endpoint
    table, the error catalogue), never on the configuration, so one copy serves every process's request."""
    return compact(orjson.dumps(document()))
