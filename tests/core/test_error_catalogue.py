"""The one error catalogue (routing/core/errors.py) against the documented table (docs/errors.md)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import orjson
import pytest

from routing.core import errors
from routing.core.errors import GatewayError
from tests.core.error_table import rows

ROOT = Path(__file__).resolve().parents[2]
TABLE = rows()

SAMPLES: dict[str, Any] = {
    "message": "The field 'x' is wrong.",
    "detail": "upstream answered HTTP 503",
    "name": "gpt-x",
    "model": "chat-a",
    "path": "/v1/chat/completions",
    "allowed": "POST",
    "method": "DELETE",
    "agent": "bot",
    "got": "int",
    "expected": "an array",
    "capability": "tools",
    "dialect": "tei",
    "kind": "chat",
    "protocol": "Anthropic's Messages API",
    "param": "max_tokens",
    "requested": 9000,
    "limit": 100,
    "limit_bytes": 1024,
    "limit_count": 100,
    "estimated_tokens": 104,
    "window": 10,
    "window_s": 10.0,
    "min_bytes": 1024,
    "retry_after_s": 2.5,
    "idle_s": 60.0,
    "total_s": 10.0,
    "details": "chat-a: upstream_5xx after 3 attempts",
    "request_id": "req-1",
    "status": 422,
    "usd": 5.0,
    "spent": 4.99,
    "reserved": 0.004,
    "needed": 0.0123,
    "period": "day",
    "resets_in_s": 3600.5,
}


def _factories() -> list[tuple[str, Any]]:
    return [
        (name, fn)
        for name, fn in inspect.getmembers(errors, inspect.isfunction)
        if not name.startswith("_")
        and "__mutmut_" not in name  # `make mutation`'s copies of each function (docs/testing.md)
        and fn.__module__ == errors.__name__
        and fn.__annotations__.get("return") == "GatewayError"
    ]


FACTORIES = _factories()


def _call(fn: Any) -> GatewayError:
    sig = inspect.signature(fn)
    args = {p: SAMPLES[p] for p, spec in sig.parameters.items() if spec.default is inspect.Parameter.empty}
    return fn(**args)


def test_the_catalogue_has_a_factory_for_every_code_it_declares() -> None:
    produced = {_call(fn).code for _, fn in FACTORIES}
    assert produced == set(errors.CATALOGUE)
    assert len(FACTORIES) >= len(errors.CATALOGUE)


@pytest.mark.parametrize(("name", "fn"), FACTORIES, ids=[name for name, _ in FACTORIES])
def test_every_factory_answers_its_documented_status_and_type(name: str, fn: Any) -> None:
    err = _call(fn)
    row = TABLE.get(err.code)
    assert row is not None, f"errors.{name}() answers code {err.code!r}, which docs/errors.md does not list"
    assert row.allows(err.status), f"{err.code}: status {err.status}, documented {row.status}"
    assert err.type == row.type, f"{err.code}: type {err.type!r}, documented {row.type!r}"
    body = orjson.loads(err.body())["error"]
    assert body["code"] == err.code and body["type"] == row.type
    assert set(body) == {"message", "type", "code", "param"}
    assert len(body["message"]) > 20


def test_one_code_has_one_status_and_one_type_wherever_it_is_raised() -> None:
    seen: dict[str, set[tuple[int, str]]] = {}
    for _, fn in FACTORIES:
        err = _call(fn)
        seen.setdefault(err.code, set()).add((err.status, err.type))
    assert {code: pairs for code, pairs in seen.items() if len(pairs) > 1} == {}


def test_the_documented_table_matches_the_catalogue_for_every_code() -> None:
    for code, (status, type_) in errors.CATALOGUE.items():
        row = TABLE[code]
        assert row.type == type_
        assert row.allows(status)


def test_no_error_answer_is_built_outside_the_catalogue() -> None:
    offenders = []
    for package in ("routing", "providers", "policies", "gateway_project"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "routing" / "core" / "errors.py":
                continue
            if "GatewayError(" in path.read_text():
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], "build error answers with a factory of routing/core/errors.py"
