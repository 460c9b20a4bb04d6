"""The management API's HTTP plumbing: token authentication, JSON in and out, errors in the /v1 shape
(the one catalogue, routing.core.errors), pagination, ETag / If-Match (docs/management-api.md)."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any

import orjson
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from policies.models import ManagementToken
from policies.tokens import find_token
from routing.config import audit
from routing.core import errors
from routing.core.errors import GatewayError

log = logging.getLogger("switchboard.api")
MAX_PAGE = 200
DEFAULT_PAGE = 50
# Arrays and objects nested in one body, the body itself included (docs/security.md#identifiers): the API's
# documents are a few levels deep; deeper ones would only reach recursive code (JSON columns, validation).
MAX_DEPTH = 32

View = Callable[..., tuple[int, Any] | tuple[int, Any, dict[str, str]]]


def respond(status: int, data: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(orjson.dumps(data), status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def error_response(error: GatewayError) -> HttpResponse:
    return respond(error.status, {"error": error.error_dict()}, error.headers)


def authenticate(request: HttpRequest) -> ManagementToken:
    """The request's management token, or 401 invalid_management_token."""
    header = request.headers.get("Authorization", "")
    if not header[:7].lower() == "bearer ":
        raise errors.invalid_management_token("Missing management token.")
    token = find_token(header[7:].strip())
    if token is None:
        raise errors.invalid_management_token("The management token is unknown, revoked or expired.")
    return token


def api(*methods: str, write: tuple[str, ...] = ("POST", "PATCH", "PUT", "DELETE")) -> Callable[[View], Any]:
    """A management API view: `view(request, token, **kwargs)` returns (status, data[, headers]).

    Authentication, the method check, read-only tokens refused on writes, any GatewayError
    answered in the /v1 shape, and any other failure a 500 `internal_error` with a request id.
    """

    def decorate(view: View) -> Any:
        @csrf_exempt
        @wraps(view)
        def handler(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            try:
                token = authenticate(request)
                if request.method not in methods:
                    raise errors.method_not_allowed(request.method or "", request.path, ", ".join(methods))
                if request.method in write and token.scope != "write":
                    raise errors.permission_denied(f"The token '{token.name}' is read-only; {request.method} writes.")
                if request.method in write:  # every write of the view is the token's (docs/audit.md)
                    with audit.acting(f"token:{token.name}", "api", audit.client_address(request)):
                        result = view(request, token, **kwargs)
                else:
                    result = view(request, token, **kwargs)
            except GatewayError as error:
                return error_response(error)
            except Exception:  # noqa: BLE001 - a bug or the database: a JSON 500 with an id, never HTML
                request_id = uuid.uuid4().hex
                log.exception("management API %s %s failed (request %s)", request.method, request.path, request_id)
                return error_response(errors.internal_error(request_id))
            status, data, *rest = result
            return respond(status, data, rest[0] if rest else None)

        return handler

    return decorate


def body(request: HttpRequest) -> dict[str, Any]:
    """The JSON object of the request body (empty body: {}), or 400 invalid_request."""
    if not request.body:
        return {}
    if b"\\u0000" in request.body or b"\x00" in request.body:
        raise errors.invalid_request("The body holds a NUL character (\\u0000), which cannot be stored: remove it.")
    try:
        data = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    if not isinstance(data, dict):
        raise errors.body_not_object()
    field = deepest_field(data, MAX_DEPTH)
    if field is not None:
        raise errors.invalid_request(
            f"The field '{field}' nests arrays or objects more than {MAX_DEPTH} levels deep: flatten it.", field
        )
    return {name: value if name == "metadata" else whole_numbers(value) for name, value in data.items()}


def whole_numbers(value: Any) -> Any:
    """`value` with each float that has no fraction (`60.0`) as an int: JSON Schema counts it as an integer,
    and the one validation wants whole numbers as ints (docs/request-validation.md#integers). Metadata is
    kept as sent; the body is at most MAX_DEPTH deep, so the recursion is bounded."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    return value


def deepest_field(data: dict[str, Any], limit: int) -> str | None:
    """The top-level field of `data` that nests containers past `limit` levels (the body is level 1),
    found without recursion (so a 1 000-deep body cannot reach the interpreter's recursion limit)."""
    for name, value in data.items():
        stack: list[tuple[Any, int]] = [(value, 2)]
        while stack:
            item, level = stack.pop()
            if not isinstance(item, dict | list):
                continue
            if level > limit:
                return name
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return None


def only(data: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    """400 for a field the endpoint does not take (a typo must not pass silently)."""
    for name in data:
        if name not in allowed:
            raise errors.invalid_request(
                f"Unknown field '{name}' for {what}: the fields are {', '.join(allowed)}.", name
            )


def refuse(refusals: list[Any]) -> None:
    """403 `forbidden` naming the first change past the org's bounds (routing.ops.scope's `Refusal`s); none: go on."""
    if refusals:
        raise errors.forbidden(refusals[0].message, refusals[0].param)


def page(request: HttpRequest) -> tuple[int, int]:
    """(limit, offset) from ?limit=&offset=, or 400 naming the parameter."""
    values = []
    for name, default, top in (("limit", DEFAULT_PAGE, MAX_PAGE), ("offset", 0, 10**9)):
        raw = request.GET.get(name, "")
        if raw == "":
            values.append(default)
            continue
        if not (raw.isascii() and raw.isdigit()) or not (name == "offset" or 1 <= int(raw)) or int(raw) > top:
            low = 1 if name == "limit" else 0
            raise errors.invalid_request(f"{name} must be a whole number from {low} to {top}, got {raw[:20]!r}.", name)
        values.append(int(raw))
    return values[0], values[1]


def listing(items: list[Any], total: int, limit: int, offset: int) -> dict[str, Any]:
    more = offset + len(items) < total
    return {
        "object": "list",
        "data": items,
        "total": total,
        "limit": limit,
        "offset": offset,
        "next_offset": offset + len(items) if more else None,
    }


def etag(data: Any) -> str:
    """A strong ETag of a resource's representation: any change to it changes the tag."""
    return '"' + hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20] + '"'


def check_if_match(request: HttpRequest, current: str, name: str) -> None:
    """412 when If-Match names another ETag (absent: the write goes ahead; `*`: any)."""
    sent = request.headers.get("If-Match")
    if sent is None:
        return
    tags = [t.strip().removeprefix("W/") for t in sent.split(",")]
    if "*" not in tags and current not in tags:
        raise errors.precondition_failed(name)


def atomic() -> Any:
    return transaction.atomic()


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def text_param(request: HttpRequest, name: str) -> str:
    """A query parameter as text ('' when absent), or 400 for one no column could hold."""
    value = request.GET.get(name, "")
    if "\x00" in value or len(value) > 200:
        raise errors.invalid_request(f"{name} must be at most 200 characters, without NUL.", name)
    return value


def parse_time(value: Any, param: str) -> datetime | None:
    """An ISO 8601 timestamp (naive: UTC) from 1970 to 9998, or null; else 400 naming the field."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
            parsed = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
        except (ValueError, OverflowError):
            parsed = None
        if parsed is not None and 1970 <= parsed.year <= 9998:
            return parsed
    raise errors.invalid_request(
        f"{param} must be an ISO 8601 timestamp such as '2030-01-31T12:00:00Z', or null; got {str(value)[:40]!r}.",
        param,
    )
