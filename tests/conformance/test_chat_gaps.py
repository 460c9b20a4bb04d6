"""The edges of a chat field with no counterpart on a translated link (the matrix walks the cells; these are
the values that ask for nothing and must pass, and the name a refusal carries)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from routing.core.errors import GatewayError
from routing.upstream.translate.shared import chat_gaps
from tests.gateway.conftest import API_KEY
from tests.inprocess import gateway_application

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


async def _chat(body: dict[str, Any]) -> httpx.Response:
    transport = httpx.ASGITransport(app=gateway_application)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        return await http.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {API_KEY}"})


@pytest.mark.asyncio(loop_scope="module")
async def test_a_refusal_answers_the_request_even_with_a_fallback(mock: Any) -> None:
    """As for a Messages request's no-counterpart field: the client sent the field and gets told, rather than
    the gateway silently moving it to another model; nothing reaches either upstream."""
    seen = [mock.model(upstream).requests for upstream in ("up-anthropic", "up-openai")]
    before = [len(requests) for requests in seen]
    hello = [{"role": "user", "content": "Hello there"}]
    answer = await _chat({"model": "m-chain-claude", "messages": hello, "n": 2, "seed": 5})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_capability", "n")
    assert [len(requests) for requests in seen] == before


@pytest.mark.asyncio(loop_scope="module")
async def test_a_link_that_serves_names_only_its_own_drops(mock: Any) -> None:
    hello = [{"role": "user", "content": "Hello there"}]
    answer = await _chat({"model": "m-chain-claude", "messages": hello, "seed": 5, "user": "u-1"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-switchboard-dropped"] == "seed"  # user became metadata.user_id
    sent = orjson.loads(mock.model("up-anthropic").requests[-1][2])
    assert sent["metadata"] == {"user_id": "u-1"} and "seed" not in sent
