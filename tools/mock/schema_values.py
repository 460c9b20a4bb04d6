"""A value that satisfies a JSON schema, derived from the schema and a seed (the mock's structured answers).

A model asked for structured output (a forced tool, Gemini's `responseSchema`) answers with JSON
that fits the schema it was given. The mock does the same, so a client library that validates the
answer against its own model (pydantic, the Agents SDK, LangChain) accepts it: the value is built
from the schema alone, and the seed (the request's bytes) picks among the choices the schema leaves
open (an enum member, an `anyOf` branch, a list's length, whether an optional property is there), so
one request always gets the same answer and different requests exercise different shapes.

Covered: `type` (one or a list; Gemini's upper-case names too), `enum`, `const`, `$ref` into `$defs`
or `definitions`, `anyOf` / `oneOf` / `allOf`, `nullable`, objects (`properties`, `required`),
arrays (`items`, `prefixItems`, `minItems`, `maxItems`), strings (`minLength`, `maxLength` and the
usual `format`s; an unconstrained string is "mock", as the mock's other tool calls answer), numbers
and integers (`minimum`, `maximum` and their exclusive forms, `multipleOf`). A `pattern` is not
generated. Recursion stops at `MAX_DEPTH`: below it, optional parts are left out and lists are as
short as the schema allows.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import orjson

MAX_DEPTH = 6
STRING = "mock"
FORMATS = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "email": "mock@example.com",
    "uri": "https://example.com/mock",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def seed_of(data: bytes) -> int:
    """A stable seed for a request's bytes (Python's own hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def answer_for(schema: Any, body: dict[str, Any]) -> Any:
    """The structured answer to the request `body`: a value of `schema` seeded by the body's JSON."""
    return value_for(schema, seed_of(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)))


def halves(value: Any) -> tuple[str, str]:
    """`value`'s JSON text in two pieces, as a streamed answer delivers it."""
    text = orjson.dumps(value).decode()
    return text[: len(text) // 2], text[len(text) // 2 :]


def value_for(schema: Any, seed: int) -> Any:
    """A JSON value valid for `schema`, the same for the same (schema, seed)."""
    root = schema if isinstance(schema, dict) else {}
    return _Builder(root, random.Random(seed)).build(root, 0)


class _Builder:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` with its `$ref` (a local JSON pointer) and `allOf` folded in."""
        seen = 0
        while isinstance(schema.get("$ref"), str) and seen < 32:
            target: Any = self.root
            for part in schema["$ref"].removeprefix("#").strip("/").split("/"):
                if part:
                    target = target.get(part.replace("~1", "/").replace("~0", "~"), {})
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**(target if isinstance(target, dict) else {}), **rest}
            seen += 1
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, dict):
                    merged = _merge(merged, self.resolve(part))
            schema = merged
        return schema

    def build(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):
            return STRING if schema is not False else None
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"])
        branches = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(branches, list) and branches:
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            return self.build(_merge(rest, self.rng.choice(branches)), depth + 1)
        kind = self.kind(schema)
        if kind == "null":
            return None
        if schema.get("nullable") is True and self.rng.random() < 0.25:
            return None
        return getattr(self, f"build_{kind}")(schema, depth)

    def kind(self, schema: dict[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [str(k).lower() for k in kind] or ["string"]
            return self.rng.choice(kinds)
        if isinstance(kind, str) and kind.lower() in _KINDS:
            return kind.lower()
        if "properties" in schema or "required" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        return "string"

    def build_object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = set(schema.get("required") or ())
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or (depth < MAX_DEPTH and self.rng.random() < 0.5):
                out[name] = self.build(sub, depth + 1)
        for name in sorted(required - set(properties)):
            out[name] = STRING  # required but undescribed: any value fits
        return out

    def build_array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        low = max(int(schema.get("minItems") or 0), len(prefix))
        high = schema.get("maxItems")
        high = low + 2 if high is None else int(high)
        if depth >= MAX_DEPTH:
            high = low
        length = self.rng.randint(min(max(low, 1), high), high) if high >= low else low
        items = schema.get("items", {})
        out = [self.build(sub, depth + 1) for sub in prefix[:length]]
        out.extend(self.build(items, depth + 1) for _ in range(length - len(out)))
        return out

    def build_string(self, schema: dict[str, Any], depth: int) -> str:
        text = FORMATS.get(str(schema.get("format")), STRING)
        low = int(schema.get("minLength") or 0)
        if len(text) < low:
            text += "x" * (low - len(text))
        high = schema.get("maxLength")
        return text[: int(high)] if high is not None else text

    def build_integer(self, schema: dict[str, Any], depth: int) -> int:
        low, high = _bounds(schema, 1)
        low, high = math.ceil(low), math.floor(high)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first = math.ceil(low / step) * step
            choices = (high - first) // step if high >= first else 0
            return first + step * self.rng.randint(0, max(0, int(choices)))
        return self.rng.randint(int(low), int(max(low, high)))

    def build_number(self, schema: dict[str, Any], depth: int) -> float:
        if isinstance(schema.get("multipleOf"), int):
            return float(self.build_integer(schema, depth))
        low, high = _bounds(schema, 0.001)
        return round(low + (high - low) * self.rng.random(), 3) if high > low else float(low)

    def build_boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5


_KINDS = ("object", "array", "string", "integer", "number", "boolean", "null")


def _bounds(schema: dict[str, Any], gap: float) -> tuple[float, float]:
    """The closed range a number may take: the schema's bounds, else 0..100 around whichever is given."""
    low = schema.get("minimum")
    high = schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + gap
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = schema["exclusiveMaximum"] - gap
    if low is None:
        low = 0 if high is None or high >= 0 else high - 100
    if high is None:
        high = low + 100
    return low, high


def _merge(base: dict[str, Any], extra: Any) -> dict[str, Any]:
    """`base` with `extra`'s keywords; properties and required lists are united (allOf's meaning)."""
    if not isinstance(extra, dict):
        return base
    out = {**base, **extra}
    if isinstance(base.get("properties"), dict) and isinstance(extra.get("properties"), dict):
        out["properties"] = {**base["properties"], **extra["properties"]}
    if base.get("required") and extra.get("required"):
        out["required"] = [*base["required"], *[r for r in extra["required"] if r not in base["required"]]]
    return out


__all__ = ["MAX_DEPTH", "answer_for", "halves", "seed_of", "value_for"]
