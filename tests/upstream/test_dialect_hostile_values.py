"""No dialect answers a hostile field value with anything but a 400 (docs/request-validation.md#dialects).

The edge validates shapes first, but a dialect is also called by other entry points
(explain, the Anthropic Messages endpoint): each field it translates is fed every
wrong JSON type here, directly, without the edge in front. A value is either
translated or refused with 400 `invalid_request`; never a TypeError, a KeyError or
an encoder failure (a 500).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.upstream.dialects import DIALECTS
from routing.upstream.dialects.base import PreparedRequest
from tests.upstream.conftest import model

DEEP = orjson.loads(b"[" * 400 + b"]" * 400)
HOSTILE: list[Any] = [5, 1.5, True, None, "x", "", [], {}, [5], [None], [{}], {"a": 5}, [[1]], DEEP]

VALID = {
    "chat": {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        "stop": ["\n"],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 5,
        "max_tokens": 10,
        "max_completion_tokens": 10,
        "user": "u1",
        "response_format": {"type": "json_object"},
    },
    "embeddings": {
        "model": "m",
        "input": ["a", "b"],
        "dimensions": 8,
        "encoding_format": "float",
        "input_type": "query",
    },
    "rerank": {"model": "m", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1},
    "responses": {"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "x"},
    "completions": {"model": "m", "prompt": ["a", "b"], "max_tokens": 5, "stop": ["\n"], "suffix": "x"},
}


def _paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every field and item position of a body, as a path of keys and indices."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield (*prefix, i)
            yield from _paths(item, (*prefix, i))


def _with(body: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(body)
    target = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


# Where each dialect's requests go, with a key it can use (default: an OpenAI-style URL and key).
TARGETS = {"bedrock": ("http://127.0.0.1:9/bedrock?region=us-east-1", "AKIDEXAMPLE:secret")}

CASES = [
    (dialect, kind, path)
    for dialect, impl in DIALECTS.items()
    for kind in sorted(impl.kinds)
    for path in _paths(VALID[kind])
]


@pytest.mark.parametrize(
    ("dialect", "kind", "path"), CASES, ids=[f"{d}-{k}-{'.'.join(map(str, p))}" for d, k, p in CASES]
)
def test_every_hostile_value_is_translated_or_refused_with_400(dialect, kind, path):
    impl = DIALECTS[dialect]
    spec = model()
    base_url, key = TARGETS.get(dialect, ("http://127.0.0.1:9/v1", "key"))
    for value in HOSTILE:
        body = _with(VALID[kind], path, value)
        try:
            prepared = impl.build_request(kind, body, spec, base_url, key, False)
        except GatewayError as exc:
            assert exc.status == 400, (value, exc)
            continue
        assert isinstance(prepared, PreparedRequest)
