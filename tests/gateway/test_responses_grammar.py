"""Streamed `/v1/responses` as bytes on the wire, on every chat-capable dialect's mock (docs/api.md#responses).

Translated streams (Anthropic, Gemini, Vertex's Gemini and Claude, Bedrock, Ollama, a chat-only Azure
deployment, a chat-only OpenAI model) are numbered by the gateway: each is held to the Responses
event grammar (tests.gateway.responses_grammar), with and without a function call. A relayed stream
(OpenAI, Azure OpenAI) is the upstream's bytes: the gateway's first frame is the events it held until
the first content, and every byte after it is the upstream's own.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.responses_grammar import check_grammar, parse_sse
from tests.gateway.test_agents_sdk import mock  # noqa: F401 - the fixture: every dialect's mock, configured
from tests.gateway.test_clients import renamed
from tests.gateway.test_record_before_answer import scope
from tests.inprocess import gateway_application

TRANSLATED = [
    "agent-claude",
    "agent-chat",
    "agent-azure-chat",
    "agent-gemini",
    "agent-bedrock",
    "agent-ollama",
    "agent-vertex-gemini",
    "agent-vertex-claude",
]
LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look something up.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    "strict": False,
}


async def serve(body: dict[str, Any]) -> list[bytes]:
    """Stream one `/v1/responses` request through the gateway; the body messages it sent, as sent."""
    inbox = [{"type": "http.request", "body": orjson.dumps(body), "more_body": False}]
    sent: list[bytes] = []
    status: list[int] = []

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await asyncio.Event().wait()  # the client never hangs up
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])

    await asyncio.wait_for(gateway_application(scope("/v1/responses"), receive, send), 10)
    assert status == [200], b"".join(sent)
    return sent


@pytest.mark.parametrize("tools", [False, True], ids=["text", "function-call"])
@pytest.mark.parametrize("model", TRANSLATED)
async def test_a_translated_stream_keeps_the_responses_grammar(mock, model, tools):  # noqa: F811
    body: dict[str, Any] = {"model": model, "input": "Find cats.", "stream": True}
    if tools:
        body["tools"] = [LOOKUP]
    completed = check_grammar(parse_sse(b"".join(await serve(body))))
    assert completed["status"] == "completed" and completed["model"] == model
    types = [item["type"] for item in completed["output"]]
    if tools:
        call = completed["output"][types.index("function_call")]
        assert call["name"] == "lookup" and orjson.loads(call["arguments"]) == {"query": "mock"}
    else:
        assert types == ["message"] and completed["output"][0]["content"][0]["text"]


@pytest.mark.parametrize(
    ("model", "upstream", "path", "headers"),
    [
        ("resp-same", "resp-same", "/v1/responses", {}),
        ("agent-azure", "up-az", "/azure/openai/responses?api-version=2024-10-21", {"api-key": "agents-key"}),
    ],
    ids=["openai-same-name", "azure-renamed"],
)
async def test_a_relayed_stream_is_the_upstreams_bytes_after_the_commit_frame(mock, model, upstream, path, headers):  # noqa: F811
    mock.model(upstream).then = {"frames": 4, "frame_delay_ms": 20}  # each event its own chunk
    body = {"model": model, "input": "Find cats.", "tools": [LOOKUP], "stream": True}
    sent = await serve(body)
    async with httpx.AsyncClient() as client:
        direct = (await client.post(f"{mock.url}{path}", json={**body, "model": upstream}, headers=headers)).content
    expected = direct if model == upstream else renamed(direct, upstream, model)
    assert b"".join(sent) == expected
    # the commit frame: what was held (created, in_progress, the item's and its part's added) sent
    # with the first content event, then every later event as the upstream sent it
    first_delta = expected.index(b"event: response.output_text.delta")
    commit_end = expected.index(b"\n\n", first_delta) + 2
    assert sent[0] == expected[:commit_end]
    assert len(sent) > 2 and all(chunk.endswith(b"\n\n") for chunk in sent)
    check_grammar(parse_sse(b"".join(sent)), contiguous=False)


def _renumbered(events: list[dict[str, Any]]) -> None:
    events[3]["sequence_number"] = events[2]["sequence_number"]


def _stray_delta(events: list[dict[str, Any]]) -> None:
    next(e for e in events if e["type"].endswith(".delta"))["item_id"] = "msg_elsewhere"


def _changed_delta(events: list[dict[str, Any]]) -> None:
    next(e for e in events if e["type"] == "response.function_call_arguments.delta")["delta"] += " "


def _done_not_completed(events: list[dict[str, Any]]) -> None:
    events[-1]["response"]["output"].pop()


def _item_changed_after_done(events: list[dict[str, Any]]) -> None:
    events[-1]["response"]["output"][0]["status"] = "in_progress"


def _never_done(events: list[dict[str, Any]]) -> None:
    last_done = max(i for i, e in enumerate(events) if e["type"] == "response.output_item.done")
    del events[last_done]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    events[-1]["response"]["output"].pop()


@pytest.mark.parametrize(
    "breakage",
    [_renumbered, _stray_delta, _changed_delta, _done_not_completed, _item_changed_after_done, _never_done],
)
async def test_the_checker_refuses_a_stream_that_breaks_the_grammar(mock, breakage):  # noqa: F811
    events = parse_sse(
        b"".join(await serve({"model": "agent-claude", "input": "x", "tools": [LOOKUP], "stream": True}))
    )
    check_grammar(copy.deepcopy(events))
    breakage(events)
    with pytest.raises(AssertionError):
        check_grammar(events)
