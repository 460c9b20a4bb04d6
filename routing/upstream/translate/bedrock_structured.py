"""Structured output and reasoning between the chat shape and Bedrock's Converse API
(docs/translation.md#bedrock), on the design of anthropic_structured, whose tool and budgets it uses.

- **Structured output.** Converse takes no `response_format` from every model, but every model with
  tools takes a forced tool: a `json_schema` (or `json_object`) format becomes one more
  `toolSpec`, `switchboard_json_output`, whose `inputSchema` is the requested schema, forced by
  `toolChoice: {tool: {name}}` (or `any` beside the client's own tools). Its input comes back as
  the message `content`, `finish_reason: stop`, streamed as content deltas: never prose.
- **Reasoning.** On Claude models with extended thinking (`THINKING_MODELS`, matched in the model
  id, inference profile or ARN) `reasoning_effort` becomes `additionalModelRequestFields.thinking`
  with anthropic_structured's budget, at most the model's output limit (its `max_output_tokens`,
  else the table's) less 1 024; `maxTokens` grows by the budget but never past that limit, so the
  budget always stays below it, as Bedrock requires. As on Anthropic, thinking excludes
  `temperature`, `top_p` and a forced tool: those beside `reasoning_effort` are refused by name.
  Another model has no reasoning field Converse would pass: `reasoning_effort` is refused by name.
- Reasoning comes back from `reasoningContent` blocks and deltas as `reasoning_content`
  (chat_to_bedrock); their signatures have no chat field.
"""

from __future__ import annotations

from typing import Any

from routing.core import errors
from routing.upstream.translate import anthropic_structured
from routing.upstream.translate.anthropic_structured import STRUCTURED_TOOL

# Claude models with extended thinking on Bedrock: id fragment -> their output-token limit
# (Anthropic's model table). The first fragment found in the model id wins.
THINKING_MODELS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-1", 32000),
    ("claude-opus-4-5", 64000),
    ("claude-opus-4", 32000),
    ("claude-sonnet-4", 64000),
    ("claude-haiku-4", 64000),
    ("claude-3-7-sonnet", 64000),
)
_SAMPLING = (("temperature", "temperature"), ("top_p", "topP"))


def output_limit(upstream_model: str) -> int | None:
    """The output-token limit of a Bedrock Claude model that thinks (None: not one the table knows)."""
    for fragment, limit in THINKING_MODELS:
        if fragment in upstream_model:
            return limit
    return None


def structured_spec(body: dict[str, Any]) -> dict[str, Any] | None:
    """The Converse toolSpec that carries a requested `response_format` schema, or None."""
    tool = anthropic_structured.structured_tool(body)
    if tool is None:
        return None
    spec = {"name": tool["name"], "description": tool["description"], "inputSchema": {"json": tool["input_schema"]}}
    return {"toolSpec": spec}


def _thinking(body: dict[str, Any], upstream_model: str, model_id: str, declared: int | None) -> tuple[Any, int]:
    """(Anthropic's `thinking` or None, the model's output limit) for `reasoning_effort`."""
    effort = body.get("reasoning_effort")
    if effort is None or effort == "none":
        return None, 0
    table = output_limit(upstream_model)
    if table is None:
        raise errors.unsupported_capability(
            model_id,
            "reasoning_effort",
            "Converse passes a thinking budget to Claude models with extended thinking only; remove reasoning_effort",
            "reasoning_effort",
        )
    limit = declared or table
    return anthropic_structured.thinking_of(body, limit), limit


def apply(body: dict[str, Any], out: dict[str, Any], upstream_model: str, model_id: str, declared: int | None) -> None:
    """Add the structured-output tool and the thinking budget of `body` to the Converse request `out`."""
    spec = structured_spec(body)
    thinking, limit = _thinking(body, upstream_model, model_id, declared)
    if thinking is not None:
        inference = out["inferenceConfig"]
        for name, field in _SAMPLING:
            if body.get(name) is not None:
                raise errors.invalid_field(name, f"{name} cannot be sent beside reasoning_effort to a Claude model")
            inference.pop(field, None)
        if spec is not None:
            raise errors.invalid_field(
                "response_format", "a structured response_format cannot be sent beside reasoning_effort to Claude"
            )
        fields = out.setdefault("additionalModelRequestFields", {})
        fields["thinking"] = thinking
        inference["maxTokens"] = min(inference["maxTokens"] + thinking["budget_tokens"], limit)
    if spec is None:
        return
    config = out.setdefault("toolConfig", {"tools": []})
    if any((t.get("toolSpec") or {}).get("name") == STRUCTURED_TOOL for t in config["tools"]):
        raise errors.invalid_field("tools", f"a tool may not be named {STRUCTURED_TOOL}: the gateway uses that name")
    config["tools"].append(spec)
    if len(config["tools"]) == 1:
        config["toolChoice"] = {"tool": {"name": STRUCTURED_TOOL}}
    else:
        config["toolChoice"] = {"any": {}}  # the client's tools or the answer, never prose


__all__ = ["STRUCTURED_TOOL", "THINKING_MODELS", "apply", "output_limit", "structured_spec"]
