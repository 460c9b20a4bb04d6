"""Reading a request: headers, request id, authentication, field checks, the models list."""

from __future__ import annotations

import hashlib
import re
import time
import uuid

import orjson

from policies.decision import decide
from routing.config.snapshot import KeySpec, OrgSpec, Snapshot
from routing.core.errors import GatewayError

ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/v1/responses": "responses",
}
_REQUEST_ID_JUNK = re.compile(r"[^A-Za-z0-9._:\-]")


def endpoint_of(path: str) -> str:
    """The endpoint kind a path serves, "models" for the list, "unknown" otherwise."""
    return ROUTES.get(path, "models" if path == "/v1/models" else "unknown")


def authenticate(snap: Snapshot, auth: bytes) -> KeySpec:
    if not auth[:7].lower() == b"bearer ":
        raise GatewayError(
            401, "invalid_api_key", "Missing API key. Send 'Authorization: Bearer <key>'.", type="authentication_error"
        )
    digest = hashlib.sha256(auth[7:].strip()).hexdigest()
    key = snap.keys.get(digest)
    if key is None:
        raise GatewayError(
            401,
            "invalid_api_key",
            "The API key is unknown or revoked. Check the key, or ask your administrator for a new one.",
            type="authentication_error",
        )
    if key.expires_at is not None and key.expires_at <= time.time():
        raise GatewayError(
            401,
            "invalid_api_key",
            "The API key has expired. Ask your administrator for a new one.",
            type="authentication_error",
        )
    return key


def request_id(raw: bytes) -> str:
    """The client's X-Request-Id with unsafe characters removed, or a new one."""
    if raw:
        cleaned = _REQUEST_ID_JUNK.sub("", raw.decode("latin-1"))[:128]
        if cleaned:
            return cleaned
    return uuid.uuid4().hex


def parse_body(raw: bytes) -> dict:
    """The JSON object of a request body, or 400 invalid_request saying what is wrong."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(
            400, "invalid_request", f"The request body is not valid JSON ({exc}). Send a JSON object."
        ) from None
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_request", "The request body must be a JSON object.")
    return body


_FIELD_TYPES: dict[str, tuple[tuple[str, type | tuple[type, ...], bool], ...]] = {
    "chat": (("messages", list, True), ("stream", bool, False), ("tools", list, False), ("max_tokens", int, False)),
    "embeddings": (("input", (str, list), True),),
    "rerank": (("query", str, True), ("documents", list, True), ("top_n", int, False)),
    "responses": (("stream", bool, False),),
}
_TYPE_NAMES = {
    list: "an array",
    bool: "a boolean",
    int: "an integer",
    str: "a string",
    (str, list): "a string or an array",
}


def check_fields(kind: str, body: dict) -> None:
    """Reject wrong field types with 400 invalid_request naming the field."""
    for name, types, required in _FIELD_TYPES[kind]:
        value = body.get(name)
        if value is None:
            if required:
                raise GatewayError(400, "invalid_request", f"The field '{name}' is required.", param=name)
            continue
        if not isinstance(value, types) or (types is int and isinstance(value, bool)):
            raise GatewayError(400, "invalid_request", f"The field '{name}' must be {_TYPE_NAMES[types]}.", param=name)


def models_payload(snap: Snapshot, org: OrgSpec) -> bytes:
    """GET /v1/models for one organisation: the models and aliases its policy allows (cached per snapshot)."""
    cache_key = ("models-list", org.name)
    payload = snap.cache.get(cache_key)
    if payload is None:
        data = []
        for model in snap.models.values():
            if decide(snap, org, model.id).allowed:
                data.append({"id": model.id, "object": "model", "created": 0, "owned_by": model.provider.name})
        for alias, target in snap.aliases.items():
            model = snap.models.get(target)
            if model is not None and decide(snap, org, model.id).allowed:
                data.append(
                    {
                        "id": alias,
                        "object": "model",
                        "created": 0,
                        "owned_by": model.provider.name,
                        "alias_of": model.id,
                    }
                )
        payload = orjson.dumps({"object": "list", "data": data})
        snap.cache[cache_key] = payload
    return payload
