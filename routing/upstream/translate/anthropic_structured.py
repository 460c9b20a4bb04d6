"""Structured output and reasoning between the chat shape and Anthropic's Messages API
(docs/translation.md#anthropic): what a chat client asks with `response_format` and
`reasoning_effort`, in the form Claude takes, and what Claude answers back in the chat shape.

- **Structured output.** Anthropic has no `response_format`: a `json_schema` (or `json_object`)
  format becomes one more tool, `switchboard_json_output`, whose input schema is the requested
  schema, and `tool_choice` forces it (or, when the client offers tools of its own, requires
  some tool). The tool's input is the answer: it comes back as the message's `content` (a JSON
  string), with `finish_reason: stop`, streamed as content deltas. A client never gets prose
  where it asked for a schema.
- **Reasoning.** `reasoning_effort` (`minimal`, `low`, `medium`, `high`) becomes extended
  thinking with a token budget (`BUDGETS`), at least Anthropic's minimum of 1 024 and at most
  the model's `max_output_tokens` less 1 024 when it declares one; `max_tokens` grows by the
  budget so the visible answer keeps what the client asked for. Thinking excludes sampling
  changes and a forced tool, so `temperature`, `top_p`, `top_k` or a structured format beside
  `reasoning_effort` is refused with a 400 naming the field rather than sent to a 400 upstream.
- **Thinking back.** Claude's thinking blocks come back as the message's `reasoning_content`
  (the convention of DeepSeek, vLLM and OpenRouter), streamed as `reasoning_content` deltas. Their
  signatures have no place in the chat shape: a chat client's next turn reaches Claude without
  them, which Anthropic accepts for every turn but a tool-use turn with thinking on.
"""

from __future__ import annotations

from typing import Any

from routing.core import errors

STRUCTURED_TOOL = "switchboard_json_output"
MIN_BUDGET = 1024  # Anthropic's smallest thinking budget
BUDGETS = {"minimal": MIN_BUDGET, "low": 2048, "medium": 8192, "high": 16384}
_SAMPLING = ("temperature", "top_p", "top_k")


def structured_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The tool that carries a requested `response_format` schema, or None (no format, or `text`)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    spec = fmt.get("json_schema") if fmt["type"] == "json_schema" else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        schema = {"type": "object"}  # json_object: any JSON object
    description = "Answer by calling this tool: its input is the whole answer, as JSON."
    if isinstance(spec, dict) and isinstance(spec.get("description"), str):
        description += " " + spec["description"]
    return {"name": STRUCTURED_TOOL, "description": description, "input_schema": schema}


def thinking_of(body: dict[str, Any], max_output_tokens: int | None) -> dict[str, Any] | None:
    """Anthropic's `thinking` for a chat `reasoning_effort`, its budget within the model's range."""
    effort = body.get("reasoning_effort")
    if effort is None or effort == "none":
        return None
    if effort not in BUDGETS:
        raise errors.invalid_field("reasoning_effort", f"reasoning_effort must be one of {', '.join(BUDGETS)}")
    budget = BUDGETS[effort]
    if max_output_tokens is not None:
        budget = min(budget, max(MIN_BUDGET, max_output_tokens - MIN_BUDGET))
    return {"type": "enabled", "budget_tokens": budget}


def apply(body: dict[str, Any], out: dict[str, Any], max_output_tokens: int | None) -> None:
    """Add the structured-output tool and the thinking budget of `body` to the Anthropic request `out`."""
    tool = structured_tool(body)
    thinking = thinking_of(body, max_output_tokens)
    if thinking is not None:
        for name in _SAMPLING:
            if body.get(name) is not None:
                raise errors.invalid_field(name, f"{name} cannot be sent beside reasoning_effort to a Claude model")
        if tool is not None:
            raise errors.invalid_field(
                "response_format", "a structured response_format cannot be sent beside reasoning_effort to Claude"
            )
        for name in _SAMPLING:
            out.pop(name, None)
        out["thinking"] = thinking
        out["max_tokens"] = out["max_tokens"] + thinking["budget_tokens"]
    if tool is None:
        return
    tools = out.setdefault("tools", [])
    if any(t.get("name") == STRUCTURED_TOOL for t in tools):
        raise errors.invalid_field("tools", f"a tool may not be named {STRUCTURED_TOOL}: the gateway uses that name")
    tools.append(tool)
    if len(tools) == 1:
        out["tool_choice"] = {"type": "tool", "name": STRUCTURED_TOOL}
    else:
        out["tool_choice"] = {"type": "any"}  # the client's tools or the answer, never prose


__all__ = ["BUDGETS", "STRUCTURED_TOOL", "apply", "structured_tool", "thinking_of"]
