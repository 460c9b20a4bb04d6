"""A chat client served by a Bedrock (Converse) link, its structured output and reasoning pinned field by
field (docs/translation.md#bedrock): the forced tool's spec, the thinking budget within the declared or
the table's output limit, and the refusals a client reads (their field and their words). Pure functions
on recorded shapes, in process; each test kills mutants the broader tests let live (docs/testing.md
"Mutation testing")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from routing.core.errors import GatewayError
from routing.upstream.translate.bedrock_structured import STRUCTURED_TOOL
from routing.upstream.translate.chat_to_bedrock import converse_request

USER = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
FORMAT = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "description": "A query."}}
SONNET = "anthropic.claude-sonnet-4-20250514-v1:0"  # 64 000 output tokens
LLAMA = "meta.llama3-70b-instruct-v1:0"


def link(upstream: str, max_output_tokens: int | None = None) -> Any:
    return SimpleNamespace(id="bed", upstream_model=upstream, max_output_tokens=max_output_tokens)


def refusal(body: dict[str, Any], upstream: str = SONNET) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        converse_request({"messages": USER, **body}, link(upstream))
    assert caught.value.status == 400
    return caught.value


def test_a_json_schema_is_a_forced_tool_spec_with_its_description():
    out = converse_request({"messages": USER, "response_format": FORMAT}, link(LLAMA))
    assert out["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": STRUCTURED_TOOL,
                    "description": "Answer by calling this tool: its input is the whole answer, as JSON. A query.",
                    "inputSchema": {"json": SCHEMA},
                }
            }
        ],
        "toolChoice": {"tool": {"name": STRUCTURED_TOOL}},
    }


def test_reasoning_effort_none_asks_nothing_of_a_model_that_cannot_think():
    out = converse_request({"messages": USER, "reasoning_effort": "none"}, link(LLAMA))
    assert "additionalModelRequestFields" not in out


def test_reasoning_effort_on_a_model_that_cannot_think_is_refused_by_name():
    error = refusal({"reasoning_effort": "low"}, LLAMA)
    assert error.code == "unsupported_capability"
    assert error.param == "reasoning_effort"
    assert error.message == (
        "model bed does not support 'reasoning_effort'; Converse passes a thinking budget to Claude models "
        "with extended thinking only; remove reasoning_effort."
    )


def test_the_budget_stays_below_the_declared_output_limit():
    out = converse_request({"messages": USER, "reasoning_effort": "high", "max_tokens": 2000}, link(SONNET, 4096))
    assert out["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 4096 - 1024}}
    assert out["inferenceConfig"]["maxTokens"] == 4096


def test_without_a_declared_limit_the_tables_bounds_max_tokens():
    out = converse_request({"messages": USER, "reasoning_effort": "high", "max_tokens": 60000}, link(SONNET))
    assert out["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 16384
    assert out["inferenceConfig"]["maxTokens"] == 64000


def test_sampling_beside_reasoning_is_refused_with_its_reason():
    error = refusal({"reasoning_effort": "low", "top_p": 0.5})
    assert error.param == "top_p"
    assert "top_p cannot be sent beside reasoning_effort to a Claude model" in error.message


def test_a_structured_format_beside_reasoning_is_refused_with_its_reason():
    error = refusal({"reasoning_effort": "low", "response_format": FORMAT})
    assert error.param == "response_format"
    assert error.message == (
        "Invalid 'response_format': a structured response_format cannot be sent beside reasoning_effort to Claude. "
        "Fix it and resend; nothing was sent upstream."
    )


def test_a_client_tool_with_the_gateways_name_is_refused():
    tools = [{"type": "function", "function": {"name": STRUCTURED_TOOL, "parameters": {"type": "object"}}}]
    error = refusal({"tools": tools, "response_format": FORMAT}, LLAMA)
    assert error.param == "tools"
    assert f"a tool may not be named {STRUCTURED_TOOL}: the gateway uses that name" in error.message


def test_a_client_tool_beside_the_format_lets_the_model_call_either():
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    out = converse_request({"messages": USER, "tools": tools, "response_format": FORMAT}, link(LLAMA))
    assert [t["toolSpec"]["name"] for t in out["toolConfig"]["tools"]] == ["search", STRUCTURED_TOOL]
    assert out["toolConfig"]["toolChoice"] == {"any": {}}
