"""Reading a request: request id, authentication, the body, the models list (shapes:
routing.gateway.body_schemas; the routes: routing.core.endpoints)."""

from __future__ import annotations

import hashlib
import re
import time

import orjson

from policies.decision import decide
from routing.config.snapshot import KeySpec, OrgSpec, Snapshot
from routing.core import errors
from routing.core.ids import new_id

_REQUEST_ID_JUNK = re.compile(r"[^A-Za-z0-9._:\-]")


def authenticate(snap: Snapshot, auth: bytes) -> KeySpec:
    if not auth[:7].lower() == b"bearer ":
        raise errors.missing_api_key()
    digest = hashlib.sha256(auth[7:].strip()).hexdigest()
    key = snap.keys.get(digest)
    if key is None:
        raise errors.invalid_api_key()
    if key.expires_at is not None and key.expires_at <= time.time():
        raise errors.expired_api_key(key.rotated)
    if not key.enabled:
        raise errors.disabled_api_key()
    return key


def request_id(raw: bytes) -> str:
    """The client's X-Request-Id with unsafe characters removed, or a new one."""
    if raw:
        cleaned = _REQUEST_ID_JUNK.sub("", raw.decode("latin-1"))[:128]
        if cleaned:
            return cleaned
    return new_id()


def parse_body(raw: bytes) -> dict:
    """The JSON object of a request body, or 400 invalid_request saying what is wrong."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    if not isinstance(body, dict):
        raise errors.body_not_object()
    return body


def _model_entries(snap: Snapshot, org: OrgSpec, key: KeySpec | None) -> dict[str, bytes]:
    """Every model and alias the organisation's policy allows, narrowed by the key's own list when it
    has one (docs/limits.md#keys), id -> its JSON object; cached per snapshot (per key only for such keys).

    `created` is the time of the configuration version served (Snapshot.config_time): the
    configuration holds no per-model date, and this one is stable until the configuration changes."""
    narrowed = key is not None and key.models is not None
    cache_key = ("models-entries", org.name, key.prefix) if narrowed else ("models-entries", org.name)
    entries = snap.cache.get(cache_key)
    if entries is not None:
        return entries
    entries = {}
    created = snap.config_time
    for model in snap.models.values():
        if decide(snap, org, model.id).allowed and (not narrowed or key.allows(model.id)):
            entries[model.id] = orjson.dumps(
                {"id": model.id, "object": "model", "created": created, "owned_by": model.provider.name}
            )
    for alias, target in snap.aliases.items():
        model = snap.models.get(target)
        if model is None or not decide(snap, org, model.id).allowed:
            continue
        if narrowed and not key.allows(alias, model.id):
            continue
        entry = {"id": alias, "object": "model", "created": created, "owned_by": model.provider.name}
        entries[alias] = orjson.dumps({**entry, "alias_of": model.id})
    snap.cache[cache_key] = entries
    return entries


def named_model(body: dict) -> str:
    """The `model` a (refused) body names, as far as it is a string: for its log line and usage record."""
    name = body.get("model")
    return name[:200] if isinstance(name, str) else ""


def models_payload(snap: Snapshot, org: OrgSpec, key: KeySpec | None = None) -> bytes:
    """GET /v1/models for one organisation and key: the list of what _model_entries allows."""
    narrowed = key is not None and key.models is not None
    cache_key = ("models-list", org.name, key.prefix) if narrowed else ("models-list", org.name)
    payload = snap.cache.get(cache_key)
    if payload is None:
        entries = _model_entries(snap, org, key)
        payload = b'{"object":"list","data":[' + b",".join(entries.values()) + b"]}"
        snap.cache[cache_key] = payload
    return payload


def model_payload(snap: Snapshot, org: OrgSpec, key: KeySpec, name: str) -> bytes:
    """GET /v1/models/{name}: the one model or alias, or 404 model_not_found when it does not exist *or*
    this key may not use it (the answer must not tell a key which models exist beyond its own)."""
    entry = _model_entries(snap, org, key).get(name)
    if entry is None:
        raise errors.model_not_found(name)
    return entry
