"""The edges of a chat field with no counterpart on a translated link (the matrix walks the cells; these are
the values that ask for nothing and must pass, and the name a refusal carries)."""

from __future__ import annotations

from typing import Any

import pytest

from routing.core.errors import GatewayError
from routing.upstream.translate.shared import chat_gaps

CLAUDE = (("n", "logprobs"), ("seed",))
CONVERSE = (("n", "logprobs"), ("seed", "user", "parallel_tool_calls"))
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _gaps(body: dict[str, Any], table: tuple[tuple[str, ...], tuple[str, ...]]) -> tuple[str, ...]:
    return chat_gaps(body, "m", "anthropic", *table)


@pytest.mark.parametrize("body", [{"n": 1}, {"n": None}, {"logprobs": False}, {"parallel_tool_calls": True}])
def test_what_asks_for_nothing_passes_unnamed(body: dict[str, Any]) -> None:
    assert _gaps(body, CONVERSE) == ()


def test_parallel_tool_calls_false_without_tools_loses_nothing() -> None:
    assert _gaps({"parallel_tool_calls": False}, CONVERSE) == ()
    assert _gaps({"parallel_tool_calls": False, "tools": TOOLS}, CONVERSE) == ("parallel_tool_calls",)


def test_hints_are_named_in_order() -> None:
    assert _gaps({"seed": 0, "user": "u", "parallel_tool_calls": False, "tools": TOOLS}, CONVERSE) == (
        "seed",
        "user",
        "parallel_tool_calls",
    )
    assert _gaps({"seed": 7, "user": "u"}, CLAUDE) == ("seed",)


@pytest.mark.parametrize(
    ("body", "param"),
    [({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 3}, "top_logprobs")],
)
def test_what_the_answer_would_lack_is_refused_by_name(body: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        _gaps(body, CLAUDE)
    assert caught.value.status == 400
    assert caught.value.code == "unsupported_capability"
    assert caught.value.param == param
