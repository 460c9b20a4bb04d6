"""What the response cache may serve and under which key (docs/cache.md). Pure: no I/O.

A model opts in with `cache_ttl_s`. Its non-streaming chat, embeddings and rerank
requests are looked up and stored; every other request to it (a stream, the
Messages or Responses endpoint, an Idempotency-Key call) is answered from the
upstream and says `bypass`. `Cache-Control: no-cache` skips the lookup but stores
the fresh answer; `no-store` neither reads nor stores.

The key is the sha256 of the endpoint, the org, the resolved model (and the
upstream it maps to, so re-pointing a model starts a fresh cache) and the
canonical JSON of the body: keys sorted at every level, whole-number floats of
top-level parameters written as integers (`temperature: 1` and `1.0` are one
request), and the fields that never change an answer left out. One org never
reads another's answers: the org is part of every key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from routing.core.endpoints import ENDPOINTS

# The endpoints whose rows say the cache may store them (routing.core.endpoints: chat, embeddings, rerank).
CACHEABLE_ENDPOINTS = frozenset(row.kind for row in ENDPOINTS if row.cacheable)

# Body fields that never change the answer: the model (replaced by the resolved one, so an
# alias and its target share entries), stream flags (cacheable requests do not stream), and
# bookkeeping for the upstream (end-user ids, stored-completion metadata, prompt-cache hints).
IGNORED_FIELDS = frozenset(
    {"model", "stream", "stream_options", "user", "safety_identifier", "metadata", "store", "prompt_cache_key"}
)

HIT, MISS, BYPASS, COALESCED = "hit", "miss", "bypass", "coalesced"
KEY_PREFIX = "switchboard:cache:v1:"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the cache does for one request of a cached model."""

    key: str  # "" when the request is not cacheable (then read and store are False)
    ttl_s: int
    read: bool  # look it up (and join an identical request in flight)
    store: bool  # keep a 200 answer for ttl_s


def directives(cache_control: bytes) -> tuple[bool, bool]:
    """(read, store) allowed by a request's Cache-Control header (case-insensitive, any order)."""
    if not cache_control:
        return True, True
    tokens = {t.strip().split("=", 1)[0] for t in cache_control.decode("latin-1").lower().split(",")}
    if "no-store" in tokens:
        return False, False
    if "no-cache" in tokens:
        return False, True
    return True, True


def canonical_body(body: dict[str, Any]) -> bytes:
    """The body as canonical JSON, without the fields that never change the answer."""
    kept = {}
    for name, value in body.items():
        if name in IGNORED_FIELDS:
            continue
        if value.__class__ is float and value.is_integer():
            value = int(value)
        kept[name] = value
    return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)


def cache_key(endpoint: str, org: str, model_id: str, upstream: str, body: dict[str, Any]) -> str:
    """The storage key of a request: sha256 over endpoint, org, model, upstream and canonical body."""
    digest = hashlib.sha256(f"{endpoint}\0{org}\0{model_id}\0{upstream}\0".encode())
    digest.update(canonical_body(body))
    return KEY_PREFIX + digest.hexdigest()


def plan(
    endpoint: str, org: str, model: Any, body: dict[str, Any], stream: bool, idempotent: bool, cache_control: bytes
) -> Plan | None:
    """The cache's plan for a request to `model` (its `id`, `upstream_model`, `cache_ttl_s`), or None
    when the model has no cache (no header, no cost)."""
    ttl_s = model.cache_ttl_s
    if ttl_s is None:
        return None
    if stream or idempotent or endpoint not in CACHEABLE_ENDPOINTS:
        return Plan("", ttl_s, False, False)
    read, store = directives(cache_control)
    if not (read or store):
        return Plan("", ttl_s, False, False)
    return Plan(cache_key(endpoint, org, model.id, model.upstream_model, body), ttl_s, read, store)
