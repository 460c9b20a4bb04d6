"""A value that satisfies a JSON Schema, for the mock's constrained answers (Gemini's JSON mode, a
forced Bedrock tool): what a provider's constrained decoding guarantees, the mock writes too.

Covers what the mock is sent: `$ref` into `$defs`, `const`, `enum`, `anyOf`/`oneOf` (the first
branch), `type` (a list: its first non-null type; OpenAPI's upper-case names too), objects (every
property), arrays (`minItems` items, at least one), strings, numbers within `minimum`/`maximum`,
booleans and null.
"""

from __future__ import annotations

from typing import Any

STRING = "mock"


def instance(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """One value valid against `schema` (`root`: the schema `$ref`s resolve in)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 16:
        return STRING
    if isinstance(schema.get("$ref"), str):
        name = schema["$ref"].rsplit("/", 1)[-1]
        defs = root.get("$defs") or root.get("definitions") or {}
        return instance(defs.get(name, {}), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance(schema[key][0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance(sub, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return [instance(schema.get("items"), root, depth + 1) for _ in range(max(1, schema.get("minItems") or 1))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return STRING
