"""The cache key and what may be cached (routing.plan.cache_key, docs/cache.md)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from routing.gateway.body_schemas import ChatRequest, EmbeddingsRequest, RerankRequest
from routing.plan.cache_key import Plan, cache_key, canonical_body, directives, plan

BODY = {
    "model": "fast",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.2,
    "max_tokens": 50,
}


def key(body: dict, endpoint: str = "chat", org: str = "acme", model: str = "chat-a", upstream: str = "x") -> str:
    return cache_key(endpoint, org, model, upstream, body)


def test_field_order_at_any_depth_does_not_change_the_key():
    shuffled = {
        "max_tokens": 50,
        "temperature": 0.2,
        "messages": [{"content": "hi", "role": "user"}],
        "model": "fast",
    }
    assert key(shuffled) == key(BODY)


def test_a_whole_float_and_its_integer_are_one_request():
    assert key({**BODY, "temperature": 1}) == key({**BODY, "temperature": 1.0})
    assert key({**BODY, "temperature": 1}) != key({**BODY, "temperature": 1.5})


@pytest.mark.parametrize(
    "field, value",
    [("model", "chat-a"), ("stream", False), ("user", "end-user-7"), ("metadata", {"k": "v"}), ("store", True)],
)
def test_fields_that_never_change_the_answer_are_left_out(field, value):
    assert key({**BODY, field: value}) == key(BODY)


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", 0.3),
        ("max_tokens", 51),
        ("seed", 7),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("messages", [{"role": "user", "content": "hi!"}]),
        ("n", 2),
    ],
)
def test_fields_that_change_the_answer_change_the_key(field, value):
    assert key({**BODY, field: value}) != key(BODY)


# docs/cache.md#key: the only request fields that never change the key.
DOCUMENTED_IGNORED = {
    "model",
    "stream",
    "stream_options",
    "user",
    "safety_identifier",
    "metadata",
    "store",
    "prompt_cache_key",
}
# The cacheable endpoints, the request shape each validates against, and a smallest valid body.
SHAPES = [
    ("chat", ChatRequest, BODY),
    ("embeddings", EmbeddingsRequest, {"model": "embed-a", "input": "hi"}),
    ("rerank", RerankRequest, {"model": "rerank-a", "query": "q", "documents": ["a", "b"]}),
]
WALK = [(endpoint, f.encode_name) for endpoint, shape, _ in SHAPES for f in msgspec.structs.fields(shape)]


@pytest.mark.parametrize(("endpoint", "field"), WALK, ids=[f"{e}.{f}" for e, f in WALK])
def test_every_request_field_changes_the_key_unless_documented_as_ignored(endpoint, field):
    """Walks every field of the chat, embeddings and rerank request shapes (routing/gateway/body_schemas.py),
    so a field added to the shapes or to the ignore list without the docs fails here."""
    base = next(body for e, _, body in SHAPES if e == endpoint)
    keys = {
        key({**base, field: value}, endpoint=endpoint) for value in ("value-a", "value-b", 7, {"nested": [1]}, None)
    }
    if field in DOCUMENTED_IGNORED:
        assert keys == {key(base, endpoint=endpoint)}, f"{field} is documented as not changing the key"
    else:
        assert len(keys) == 5 and key(base, endpoint=endpoint) not in keys, f"{field} must change the cache key"


def test_the_ignored_fields_are_the_ones_the_docs_list():
    text = (Path(__file__).resolve().parents[2] / "docs" / "cache.md").read_text()
    sentence = text[text.index("without the fields that never change an") : text.index("Everything else counts")]
    assert set(re.findall(r"`([a-z_]+)`", sentence)) == DOCUMENTED_IGNORED


def test_org_model_upstream_and_endpoint_are_part_of_the_key():
    base = key(BODY)
    assert key(BODY, org="globex") != base
    assert key(BODY, model="chat-b") != base
    assert key(BODY, upstream="y") != base
    assert key(BODY, endpoint="embeddings") != base


def test_canonical_body_is_sorted_json_without_the_model():
    assert canonical_body({"b": 1, "a": {"d": 2, "c": 3}, "model": "m"}) == b'{"a":{"c":3,"d":2},"b":1}'


@pytest.mark.parametrize(
    "header, expected",
    [
        (b"", (True, True)),
        (b"no-cache", (False, True)),
        (b"No-Cache", (False, True)),
        (b"max-age=0, no-store", (False, False)),
        (b"no-cache, no-store", (False, False)),
        (b"max-age=60", (True, True)),
        # found by mutation testing: no spaces after commas, a directive with an argument
        (b"max-age=0,no-store", (False, False)),
        (b'no-cache="set-cookie"', (False, True)),
        (b'no-cache="a=b", max-age=5', (False, True)),
    ],
)
def test_cache_control_directives(header, expected):
    assert directives(header) == expected


def args(**over):
    base = dict(
        endpoint="chat", org="acme", model_id="chat-a", upstream="x", ttl_s=60, body=BODY,
        stream=False, idempotent=False, cache_control=b"",
    )  # fmt: skip
    given = {**base, **over}
    model = SimpleNamespace(
        id=given.pop("model_id"), upstream_model=given.pop("upstream"), cache_ttl_s=given.pop("ttl_s")
    )
    return {**given, "model": model}


def test_a_model_without_a_ttl_has_no_plan():
    assert plan(**args(ttl_s=None)) is None


@pytest.mark.parametrize(
    "over", [{"stream": True}, {"idempotent": True}, {"endpoint": "responses"}, {"endpoint": "messages"}]
)
def test_what_is_not_cacheable_bypasses(over):
    assert plan(**args(**over)) == Plan("", 60, False, False)


def test_no_store_neither_reads_nor_stores():
    assert plan(**args(cache_control=b"no-store")) == Plan("", 60, False, False)


def test_cacheable_requests_read_and_store_under_their_key():
    p = plan(**args())
    assert p.key == key(BODY) and p.read and p.store and p.ttl_s == 60
    assert [plan(**args(endpoint=e)).read for e in ("embeddings", "rerank")] == [True, True]
    no_cache = plan(**args(cache_control=b"no-cache"))
    assert no_cache.key and not no_cache.read and no_cache.store
    assert plan(**args(cache_control=b"no-store")).key == ""
