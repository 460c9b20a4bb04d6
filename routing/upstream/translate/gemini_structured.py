"""Structured output and reasoning between the chat shape and Gemini's generateContent
(docs/translation.md#gemini): what a chat client asks with `response_format` and
`reasoning_effort`, in the form Gemini takes (the `gemini` dialect and Google models on `vertex`).

- **Structured output** is Gemini's own: `responseMimeType: application/json`, and for a
  `json_schema` the schema as `responseJsonSchema`, the field that takes JSON Schema (the older
  `responseSchema` takes an OpenAPI subset and refuses JSON Schema's keywords). Gemini honours only
  some keywords (`SUPPORTED`); what only annotates is left out (`ANNOTATIONS`), `const` becomes a
  one-value `enum`, `definitions` becomes `$defs`, and any keyword that constrains what Gemini
  cannot is refused with a 400 naming its path in the schema: a client never gets an answer that
  only looks like it follows the schema.
- **Reasoning.** `reasoning_effort` becomes `thinkingConfig` with `includeThoughts` (so the thoughts
  come back as `reasoning_content`): a `thinkingBudget` from `BUDGETS` clamped into the model's
  range (`THINKING_BUDGETS`, per model name), or a `thinkingLevel` on the models that take levels
  (`THINKING_LEVELS`). A model the tables do not know is refused by name rather than sent a
  budget it may answer with a 400. `none` turns thinking off (budget 0) where the model allows it.
"""

from __future__ import annotations

from typing import Any

from routing.core import errors

SCHEMA_PARAM = "response_format.json_schema.schema"
# The JSON Schema keywords Gemini's responseJsonSchema honours (Google's GenerationConfig reference).
SUPPORTED = frozenset(
    {
        "$id",
        "$defs",
        "$ref",
        "$anchor",
        "type",
        "format",
        "title",
        "description",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "anyOf",
        "oneOf",
        "properties",
        "additionalProperties",
        "required",
        "propertyOrdering",
    }
)
# Keywords that describe but do not constrain: left out, the answer still follows the schema.
ANNOTATIONS = frozenset(
    {"$schema", "$comment", "default", "examples", "example", "readOnly", "writeOnly", "deprecated"}
)
_SUBSCHEMA_MAPS = ("properties", "$defs")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")

EFFORTS = ("minimal", "low", "medium", "high")
BUDGETS = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
# Model-name prefix -> (smallest budget, largest budget, whether 0 turns thinking off); the first
# matching prefix wins, so a longer one comes before its shorter one (Google's thinking guide).
THINKING_BUDGETS: tuple[tuple[str, int, int, bool], ...] = (
    ("gemini-2.5-flash-lite", 512, 24576, True),
    ("gemini-2.5-flash", 1, 24576, True),
    ("gemini-2.5-pro", 128, 32768, False),
)
# Model-name prefix -> the thinking levels it takes, lowest first (Gemini 3 takes levels, not budgets).
THINKING_LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gemini-3-pro", ("low", "high")),
    ("gemini-3", ("minimal", "low", "medium", "high")),
)


# --- structured output -----------------------------------------------------------------


def response_config(body: dict[str, Any], model_id: str, dialect: str) -> dict[str, Any]:
    """The generationConfig fields of a chat `response_format` ({} for none or `text`)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        return {}
    config: dict[str, Any] = {"responseMimeType": "application/json"}
    spec = fmt.get("json_schema") if fmt["type"] == "json_schema" else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if isinstance(schema, dict):
        config["responseJsonSchema"] = json_schema(schema, model_id, dialect)
    return config


def json_schema(schema: dict[str, Any], model_id: str, dialect: str) -> dict[str, Any]:
    """The client's JSON Schema as Gemini's responseJsonSchema takes it, or a 400 naming what it cannot express."""
    refs = "definitions" in schema and "$defs" not in schema
    return _node(schema, SCHEMA_PARAM, (model_id, dialect), refs)


def _refuse(param: str, where: tuple[str, str]) -> errors.GatewayError:
    return errors.no_counterpart(param, where[0], where[1], "chat")


def _node(node: Any, param: str, where: tuple[str, str], refs: bool) -> Any:
    """One (sub)schema converted; `refs`: rewrite `#/definitions/` references to `#/$defs/`."""
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict):
        raise _refuse(param, where)
    if "allOf" in node:
        node = _one_of_all(node, param, where)
    if "$ref" in node:
        return _ref(node, param, where, refs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        at = f"{param}.{key}"
        if key in ANNOTATIONS:
            continue
        if key == "definitions":
            key = "$defs"
        elif key == "const":
            key, value = "enum", [value]
        elif key not in SUPPORTED:
            raise _refuse(at, where)
        out[key] = _value(key, value, at, where, refs)
    return out


def _value(key: str, value: Any, param: str, where: tuple[str, str], refs: bool) -> Any:
    if key in _SUBSCHEMA_MAPS:
        if not isinstance(value, dict):
            raise _refuse(param, where)
        return {name: _node(sub, f"{param}.{name}", where, refs) for name, sub in value.items()}
    if key in _SUBSCHEMA_LISTS:
        if not isinstance(value, list):
            raise _refuse(param, where)
        return [_node(sub, f"{param}[{i}]", where, refs) for i, sub in enumerate(value)]
    if key in ("items", "additionalProperties"):
        return _node(value, param, where, refs)
    if key == "enum" and not (
        isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise _refuse(param, where)  # Gemini takes enums of strings and numbers only
    return value


def _one_of_all(node: dict[str, Any], param: str, where: tuple[str, str]) -> dict[str, Any]:
    """`allOf` of one schema (how some generators wrap a `$ref` to add a description) is that schema."""
    parts = node["allOf"]
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
        raise _refuse(f"{param}.allOf", where)
    rest = {k: v for k, v in node.items() if k != "allOf"}
    return {**rest, **parts[0]}


def _ref(node: dict[str, Any], param: str, where: tuple[str, str], refs: bool) -> dict[str, Any]:
    """A `$ref` may stand only beside `$` keywords on Gemini: annotations beside it are left out."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("$"):
            out[key] = value
        elif key not in ANNOTATIONS and key not in ("title", "description"):
            raise _refuse(f"{param}.{key}", where)
    if refs and isinstance(out["$ref"], str) and out["$ref"].startswith("#/definitions/"):
        out["$ref"] = "#/$defs/" + out["$ref"].removeprefix("#/definitions/")
    return out


# --- reasoning -------------------------------------------------------------------------


def _budget_range(upstream_model: str) -> tuple[int, int, bool] | None:
    name = upstream_model.removeprefix("models/")
    for prefix, low, high, off in THINKING_BUDGETS:
        if name.startswith(prefix):
            return low, high, off
    return None


def _levels(upstream_model: str) -> tuple[str, ...] | None:
    name = upstream_model.removeprefix("models/")
    for prefix, levels in THINKING_LEVELS:
        if name.startswith(prefix):
            return levels
    return None


def thinking_config(
    effort: Any, upstream_model: str, model_id: str, max_output_tokens: int | None
) -> dict[str, Any] | None:
    """Gemini's `thinkingConfig` for a chat `reasoning_effort` (None: none asked), inside the model's range."""
    if effort is None:
        return None
    if effort != "none" and effort not in EFFORTS:
        raise errors.invalid_field("reasoning_effort", f"reasoning_effort must be none or one of {', '.join(EFFORTS)}")
    span, levels = _budget_range(upstream_model), _levels(upstream_model)
    if span is None and levels is None:
        raise errors.unsupported_capability(
            model_id,
            "reasoning_effort",
            "the gateway knows the thinking range of gemini-2.5 and gemini-3 models only; remove reasoning_effort",
            "reasoning_effort",
        )
    if effort == "none":
        if span is None or not span[2]:
            raise errors.unsupported_capability(
                model_id, "reasoning_effort none", "this model always thinks; send low instead", "reasoning_effort"
            )
        return {"thinkingBudget": 0}
    if levels is not None:
        wanted = EFFORTS.index(effort)
        level = next((lv for lv in levels if EFFORTS.index(lv) >= wanted), levels[-1])
        return {"thinkingLevel": level, "includeThoughts": True}
    low, high, _ = span  # type: ignore[misc]
    budget = min(BUDGETS[effort], high)
    if max_output_tokens is not None:
        budget = min(budget, max_output_tokens - 1024)
    return {"thinkingBudget": max(low, budget), "includeThoughts": True}


def apply(
    body: dict[str, Any],
    config: dict[str, Any],
    upstream_model: str,
    model_id: str,
    dialect: str,
    max_output_tokens: int | None,
) -> None:
    """Add the response format and the thinking of `body` to Gemini's `generationConfig` (`config`).

    The budget is spent out of `maxOutputTokens`, so a client's own limit grows by it: the visible
    answer keeps the room the client asked for."""
    config.update(response_config(body, model_id, dialect))
    thinking = thinking_config(body.get("reasoning_effort"), upstream_model, model_id, max_output_tokens)
    if thinking is None:
        return
    config["thinkingConfig"] = thinking
    budget = thinking.get("thinkingBudget") or 0
    if budget and "maxOutputTokens" in config:
        config["maxOutputTokens"] += budget


__all__ = ["BUDGETS", "THINKING_BUDGETS", "THINKING_LEVELS", "apply", "json_schema", "thinking_config"]
