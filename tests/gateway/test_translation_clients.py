"""Reasoning and usage classes for Messages and Responses clients on a chat upstream (docs/translation.md#clients).

Through the gateway in process, with the official `anthropic` and `openai` SDKs, against the mock's
OpenAI chat endpoint scripted to reason (`reasoning_content`, or `reasoning`) and to report cached
and reasoning tokens as OpenAI's usage types do:

- an Anthropic client's `thinking` budget reaches the upstream as `reasoning_effort`, and the
  upstream's reasoning comes back as a `thinking` block (thinking_delta events when streamed) whose
  signature is empty; such a block sent back on the next turn never reaches an Anthropic upstream;
- a translated Messages stream's `message_start` carries the prompt estimate, its `message_delta`
  the upstream's own counts (cache reads, thinking tokens);
- a Responses client's `reasoning.effort` reaches the upstream as `reasoning_effort`, and the
  reasoning comes back as a `reasoning` item (summary events when streamed, in the Responses
  grammar), with the cached and reasoning token details;
- only to a model that declares `reasoning`: one that does not (scripted to answer 400 to the
  field, as gpt-4o does) gets no `reasoning_effort`, answers, and the client's `thinking` /
  `reasoning` is named in `x-switchboard-dropped`; per link along a fallback chain.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2  # what the anthropic SDK is built on
import openai
import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.plan import preflight
from routing.runtime.process import current
from routing.upstream.translate.shared import without_foreign_thinking
from tests.gateway import responses_grammar as grammar
from tests.gateway.conftest import API_KEY, key_rows
from tests.inprocess import gateway_application
from tools.mock.upstream import start_mock, state_of

CAPS = ["chat", "streaming", "tools"]
REASONS = [*CAPS, "reasoning"]
THOUGHT = "The user greets me; a greeting back will do."
# What OpenAI's CompletionUsage reports for a reasoning model with a cache hit.
USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 40,
    "total_tokens": 140,
    "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 30, "audio_tokens": 0},
}
HI = [{"role": "user", "content": "Hello there, how are you today?"}]


def document(mock: str) -> dict:
    return {
        "resilience": {"max_retries": 0},
        "providers": [
            {"name": "mock", "dialect": "openai", "base_url": f"{mock}/v1"},
            {"name": "mock-claude", "dialect": "anthropic", "base_url": f"{mock}/anthropic/v1"},
        ],
        "models": [
            {"id": "gpt", "provider": "mock", "upstream_model": "up-gpt", "capabilities": REASONS},
            {"id": "claude", "provider": "mock-claude", "upstream_model": "up-claude", "capabilities": REASONS},
            {"id": "plain", "provider": "mock", "upstream_model": "up-plain", "capabilities": CAPS},
            # two-link chains: a model that reasons falling back to one that does not, and the other way round
            {"id": "gpt-then-plain", "provider": "mock", "upstream_model": "up-gpt", "capabilities": REASONS}
            | {"fallbacks": ["plain"]},
            {"id": "plain-then-gpt", "provider": "mock", "upstream_model": "up-plain", "capabilities": CAPS}
            | {"fallbacks": ["gpt"]},
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest.fixture
async def mock() -> AsyncIterator[Any]:
    runner, port = await start_mock(0)
    previous = live.current()
    live.swap(build_snapshot(document(f"http://127.0.0.1:{port}"), key_rows(), {}, version=1))
    yield state_of(runner)
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()


def reasons(state: Any, field: str = "reasoning_content") -> None:
    """The next answer of up-gpt reasons first and reports cached and reasoning tokens."""
    state.model("up-gpt").steps.append({"reasoning": THOUGHT, "reasoning_field": field, "usage": USAGE})


def cannot_reason(state: Any, model: str = "up-plain") -> None:
    """`model` answers 400 to any `reasoning_effort`, as OpenAI's gpt-4o and many vLLM / llama.cpp models do."""
    refusal = {"error": {"message": "Unsupported parameter: 'reasoning_effort'", "param": "reasoning_effort"}}
    for effort in ("minimal", "low", "medium", "high"):
        rule = (("field", "reasoning_effort", effort), deque(), {"status": 400, "body": orjson.dumps(refusal).decode()})
        state.model(model).rules.append(rule)


def claude() -> anthropic.AsyncAnthropic:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gateway_application))
    return anthropic.AsyncAnthropic(base_url="http://gateway", api_key=API_KEY, max_retries=0, http_client=http)


def codex() -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, max_retries=0, http_client=http)


def sent(state: Any, model: str) -> list[dict]:
    return [orjson.loads(body) for _, _, body, _ in state.model(model).requests]


# --- an Anthropic Messages client ------------------------------------------------------------


@pytest.mark.parametrize(
    ("thinking", "extra", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, {}, "low"),
        ({"type": "enabled", "budget_tokens": 4000}, {}, "low"),  # Claude Code's "think"
        ({"type": "enabled", "budget_tokens": 10000}, {}, "medium"),  # "think hard"
        ({"type": "enabled", "budget_tokens": 31999}, {}, "high"),  # "ultrathink"
        ({"type": "adaptive"}, {"output_config": {"effort": "max"}}, "high"),
        ({"type": "adaptive"}, {}, None),  # the upstream's own default
        ({"type": "disabled"}, {}, None),
    ],
)
async def test_a_thinking_budget_reaches_a_chat_upstream_as_reasoning_effort(mock, thinking, extra, effort):
    async with claude() as client:
        raw = await client.messages.with_raw_response.create(
            model="gpt", max_tokens=64000, messages=HI, thinking=thinking, timeout=30, **extra
        )
    (body,) = sent(mock, "up-gpt")
    assert body.get("reasoning_effort") == effort
    assert "thinking" not in body and "output_config" not in body
    assert "thinking" not in raw.headers.get("x-switchboard-dropped", "")  # mapped, not dropped


async def test_a_thinking_type_chat_cannot_carry_is_refused_by_name_on_a_translated_link(mock):
    async with claude() as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model="gpt", max_tokens=100, messages=HI, thinking={"type": "sometimes"})
    assert "thinking.type" in info.value.message and not sent(mock, "up-gpt")


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_the_upstreams_reasoning_comes_back_as_an_unsigned_thinking_block(mock, field):
    reasons(mock, field)
    async with claude() as client:
        message = await client.messages.create(
            model="gpt", max_tokens=100, messages=HI, thinking={"type": "enabled", "budget_tokens": 2048}
        )
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == THOUGHT
    assert message.content[0].signature == ""  # only Anthropic signs thinking: none invented
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (100 - 64, 64, 40)
    assert usage.output_tokens_details is not None and usage.output_tokens_details.thinking_tokens == 30


async def test_a_streamed_answer_thinks_in_thinking_deltas_and_counts_its_prompt_from_the_start(mock):
    reasons(mock)
    async with claude() as client:
        async with client.messages.stream(
            model="gpt", max_tokens=100, messages=HI, thinking={"type": "enabled", "budget_tokens": 2048}
        ) as stream:
            events = [event async for event in stream]
            final = await stream.get_final_message()
    kinds = [e.type for e in events]
    assert "signature_delta" not in {getattr(getattr(e, "delta", None), "type", None) for e in events}
    start = events[kinds.index("message_start")]
    estimate = preflight.estimate_tokens("chat", {"messages": HI})
    assert start.message.usage.input_tokens == estimate > 0  # not 0: the gateway's estimate, before the upstream's
    first = events[kinds.index("content_block_start")]
    assert first.content_block.type == "thinking" and first.content_block.signature == ""
    thinking = [
        e.delta.thinking for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    ]
    assert "".join(thinking) == THOUGHT
    delta = events[kinds.index("message_delta")]
    assert (delta.usage.input_tokens, delta.usage.cache_read_input_tokens) == (100 - 64, 64)  # the upstream's counts
    assert delta.usage.output_tokens_details is not None and delta.usage.output_tokens_details.thinking_tokens == 30
    assert [b.type for b in final.content] == ["thinking", "text"] and final.content[0].thinking == THOUGHT
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (36, 64, 40)


async def test_an_unsigned_thinking_block_sent_back_never_reaches_an_anthropic_upstream(mock):
    reasons(mock)
    async with claude() as client:
        first = await client.messages.create(model="gpt", max_tokens=100, messages=HI)
        signed = {"type": "thinking", "thinking": "Claude's own.", "signature": "EqQBsig=="}
        history = [
            *HI,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": [signed, {"type": "text", "text": "Fine."}]},
            {"role": "user", "content": "Good."},
        ]
        await client.messages.create(model="claude", max_tokens=100, messages=history)  # a passthrough link
        await client.messages.create(model="gpt", max_tokens=100, messages=history)  # a translated one
    (to_claude,) = sent(mock, "up-claude")
    assert to_claude["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": first.content[1].text}],
    }
    assert to_claude["messages"][3]["content"][0] == signed  # Anthropic's own thinking goes up as sent
    second = sent(mock, "up-gpt")[1]
    assert all("thinking" not in orjson.dumps(m).decode() for m in second["messages"])


def test_only_unsigned_thinking_is_removed_and_a_turn_left_empty_goes_with_it():
    signed = {"type": "thinking", "thinking": "a", "signature": "EqQB=="}
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "b"}]},  # no signature at all
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": [signed, {"type": "thinking", "thinking": "c", "signature": ""}]},
        ],
    }
    out = without_foreign_thinking(body)
    assert out is not None and out["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [signed]},
    ]
    assert without_foreign_thinking(out) is None  # nothing left to remove: the body goes up as sent


# --- a Responses client ------------------------------------------------------------------------


async def test_reasoning_effort_goes_up_and_the_reasoning_comes_back_as_a_reasoning_item(mock):
    reasons(mock)
    async with codex() as client:
        response = await client.responses.create(model="gpt", input="Hello there", reasoning={"effort": "high"})
    (body,) = sent(mock, "up-gpt")
    assert body["reasoning_effort"] == "high" and "reasoning" not in body
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert [(s.type, s.text) for s in reasoning.summary] == [("summary_text", THOUGHT)]
    assert response.usage.input_tokens_details.cached_tokens == 64
    assert response.usage.output_tokens_details.reasoning_tokens == 30


async def test_a_streamed_reasoning_item_keeps_the_responses_grammar(mock):
    reasons(mock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application)) as http:
        answer = await http.post(
            "http://gateway/v1/responses",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "gpt", "input": "Hello there", "stream": True, "reasoning": {"effort": "low"}},
        )
    events = grammar.parse_sse(answer.content)
    completed = grammar.check_grammar(events)
    kinds = [e["type"] for e in events]
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
    ]
    assert completed["output"][0] == {
        "id": completed["output"][0]["id"],
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": THOUGHT}],
    }
    assert completed["usage"]["input_tokens_details"] == {"cached_tokens": 64}
    assert completed["usage"]["output_tokens_details"] == {"reasoning_tokens": 30}
    assert sent(mock, "up-gpt")[0]["reasoning_effort"] == "low"


async def test_the_openai_sdk_reads_the_streamed_reasoning_summary(mock):
    reasons(mock)
    async with codex() as client:
        async with client.responses.stream(model="gpt", input="Hello there") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.reasoning_summary_text.delta"]
            final = await stream.get_final_response()
    assert "".join(deltas) == THOUGHT
    assert final.output[0].type == "reasoning" and final.output[0].summary[0].text == THOUGHT


async def test_the_grammar_checker_holds_reasoning_summaries_to_their_deltas(mock):
    """The checker itself: a summary whose done text is not its deltas', or a delta before its part, fails."""
    reasons(mock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application)) as http:
        answer = await http.post(
            "http://gateway/v1/responses",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "gpt", "input": "Hello there", "stream": True},
        )
    events = grammar.parse_sse(answer.content)
    grammar.check_grammar(events)
    kinds = [e["type"] for e in events]
    wrong = [dict(e) for e in events]
    wrong[kinds.index("response.reasoning_summary_text.done")]["text"] = "something else"
    with pytest.raises(AssertionError):
        grammar.check_grammar(wrong)
    early = [e for e in events if e["type"] != "response.reasoning_summary_part.added"]
    with pytest.raises(AssertionError):
        grammar.check_grammar(early, contiguous=False)


# --- a model that cannot reason ----------------------------------------------------------------

THINK = {"type": "enabled", "budget_tokens": 4000}  # Claude Code's "think"


@pytest.mark.parametrize(("model", "effort"), [("plain", None), ("gpt", "low")])
@pytest.mark.parametrize("stream", [False, True])
async def test_thinking_reaches_only_a_chat_model_that_declares_reasoning(mock, model, effort, stream):
    cannot_reason(mock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application)) as http:
        answer = await http.post(
            "http://gateway/v1/messages",
            headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"},
            json={"model": model, "max_tokens": 2000, "messages": HI, "thinking": THINK, "stream": stream},
        )
    assert answer.status_code == 200, answer.text
    (body,) = sent(mock, f"up-{model}")
    assert body.get("reasoning_effort") == effort and "thinking" not in body
    if stream:
        assert body["stream_options"] == {"include_usage": True} and b"message_stop" in answer.content
    # the client asked for thinking, and the link went without it: named as a dropped hint
    assert ("thinking" in answer.headers.get("x-switchboard-dropped", "").split(", ")) is (effort is None)


async def test_adaptive_thinkings_effort_is_named_with_it_where_the_model_cannot_reason(mock):
    cannot_reason(mock)
    async with claude() as client:
        raw = await client.messages.with_raw_response.create(
            model="plain", max_tokens=100, messages=HI, thinking={"type": "adaptive"}, output_config={"effort": "high"}
        )
    (body,) = sent(mock, "up-plain")
    assert raw.status_code == 200 and "reasoning_effort" not in body
    assert raw.headers["x-switchboard-dropped"] == "thinking, output_config.effort"


@pytest.mark.parametrize(("model", "effort"), [("plain", None), ("gpt", "high")])
@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_effort_reaches_only_a_chat_model_that_declares_reasoning(mock, model, effort, stream):
    cannot_reason(mock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application)) as http:
        answer = await http.post(
            "http://gateway/v1/responses",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": model, "input": "Hello there", "stream": stream, "reasoning": {"effort": "high"}},
        )
    assert answer.status_code == 200, answer.text
    (body,) = sent(mock, f"up-{model}")
    assert body.get("reasoning_effort") == effort and "reasoning" not in body
    assert ("reasoning" in answer.headers.get("x-switchboard-dropped", "").split(", ")) is (effort is None)
    if stream:
        assert body["stream_options"] == {"include_usage": True}  # the usage frame is still asked for
        grammar.check_grammar(grammar.parse_sse(answer.content))


async def test_along_a_fallback_chain_only_the_link_that_reasons_gets_the_effort(mock):
    cannot_reason(mock)
    mock.model("up-gpt").steps.append({"status": 500})
    async with claude() as client:
        first = await client.messages.with_raw_response.create(
            model="gpt-then-plain", max_tokens=100, messages=HI, thinking=THINK
        )
        mock.model("up-plain").steps.append({"status": 500})
        second = await client.messages.with_raw_response.create(
            model="plain-then-gpt", max_tokens=100, messages=HI, thinking=THINK
        )
    to_gpt, to_plain = sent(mock, "up-gpt"), sent(mock, "up-plain")
    # gpt-then-plain: gpt (500) got the effort, plain went without and served; thinking named
    assert to_gpt[0]["reasoning_effort"] == "low" and "reasoning_effort" not in to_plain[0]
    assert first.status_code == 200 and first.headers["x-switchboard-dropped"] == "thinking"
    # plain-then-gpt: plain (500) went without, and gpt still got it (the call's body is not changed)
    assert "reasoning_effort" not in to_plain[1] and to_gpt[1]["reasoning_effort"] == "low"
    assert second.status_code == 200 and "x-switchboard-dropped" not in second.headers


async def test_a_responses_fallback_chain_sends_the_effort_to_the_link_that_reasons_only(mock):
    cannot_reason(mock)
    mock.model("up-gpt").steps.append({"status": 500})
    async with codex() as client:
        raw = await client.responses.with_raw_response.create(
            model="gpt-then-plain", input="Hello there", reasoning={"effort": "medium"}
        )
    (to_gpt,), (to_plain,) = sent(mock, "up-gpt"), sent(mock, "up-plain")
    assert to_gpt["reasoning_effort"] == "medium" and "reasoning_effort" not in to_plain
    assert raw.http_response.status_code == 200 and raw.headers["x-switchboard-dropped"] == "reasoning"
