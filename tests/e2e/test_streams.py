"""Streams end to end (docs/resilience.md#r6, docs/metrics.md#usage-records): real server, real mock, openai client.

The mock sends OpenAI's role-only first chunk, as real servers do; a stream commits
only at the first content frame, so a failure right after the role chunk still fails
over. A committed stream that breaks counts against its link's breaker and its usage
record carries the error. Streams whose client did not ask for usage still get their
tokens recorded.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.test_usage_e2e import COMPLETION_TOKENS, PROMPT_TOKENS, usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 0
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 3
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: s-role-break
    provider: mock
    upstream_model: st-role-break
    capabilities: [chat, streaming]
    fallbacks: [s-fb]
  - id: s-fb
    provider: mock
    upstream_model: st-fb
    capabilities: [chat, streaming]
  - id: s-plain
    provider: mock
    upstream_model: st-plain
    capabilities: [chat, streaming]
    input_price_per_mtok: 2.5
    output_price_per_mtok: 10
  - id: s-nousage
    provider: mock
    upstream_model: st-nousage
    capabilities: [chat, streaming]
  - id: s-broken
    provider: mock
    upstream_model: st-broken
    capabilities: [chat, streaming]
  - id: s-slow
    provider: mock
    upstream_model: st-slow
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
"""
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)


def test_a_failure_after_the_role_chunk_fails_over_to_one_clean_stream(client, mock_upstream):
    mock_upstream.script("st-role-break", [], then={"status": 200, "frames": 3, "break_after": 0})
    mock_upstream.script("st-fb", [], then={"status": 200, "frames": 2})
    raw = client.chat.completions.with_raw_response.create(model="s-role-break", messages=MESSAGES, stream=True)
    chunks = list(raw.parse())
    assert raw.headers["x-switchboard-model-used"] == "s-fb"
    assert raw.headers["x-switchboard-fallback"]
    # one clean stream from the fallback: its role chunk, two tokens, the finish chunk
    assert [c.choices[0].delta.content for c in chunks] == ["", "tok0 ", "tok1 ", None]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.model == "s-role-break" for c in chunks)  # the model asked for; the upstream's in a header
    assert raw.headers["x-switchboard-upstream-model"] == "st-fb"
    assert mock_upstream.count("st-role-break") == 1


def test_role_chunk_then_content_is_relayed_byte_identical(gw, mock_upstream):
    body = {"model": "st-plain", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=20) as http:
        direct = http.post(f"{mock_upstream.url}/v1/chat/completions", json=body).content
        through = http.post(
            f"{gw.url}/v1/chat/completions",
            json={**body, "model": "s-plain"},
            headers={"Authorization": f"Bearer {gw.api_key}"},
        ).content
    assert direct.startswith(b'data: {"id":"chatcmpl-mock","object":"chat.completion.chunk"')
    assert b'"delta":{"role":"assistant","content":""}' in direct.split(b"\n\n")[0]
    # the client asked for usage: every frame, the role chunk and usage included, the model named as asked
    assert through == direct.replace(b'"model":"st-plain"', b'"model":"s-plain"')


def test_a_stream_whose_client_did_not_ask_for_usage_is_recorded_with_tokens_and_cost(gw, client, mock_upstream):
    chunks = list(client.chat.completions.create(model="s-plain", messages=MESSAGES, stream=True))
    assert all(c.usage is None for c in chunks)  # the client never sees the usage frame it did not ask for
    assert [c.choices[0].delta.content for c in chunks] == ["", "tok0 ", "tok1 ", "tok2 ", None]
    sent = mock_upstream.calls("st-plain")["requests"][-1]["body"]
    assert sent["stream_options"] == {"include_usage": True}  # asked on the client's behalf

    def streamed_row() -> dict | None:
        rows = [r for r in usage_rows(gw.database_url) if r["model_used"] == "s-plain" and r["streamed"]]
        return rows[-1] if rows else None

    wait_for(lambda: streamed_row() is not None, 10, "the stream's usage record")
    row = streamed_row()
    assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert float(row["cost"]) == pytest.approx((PROMPT_TOKENS * 2.5 + COMPLETION_TOKENS * 10) / 1_000_000)


def test_committed_streams_that_break_open_the_breaker_and_are_recorded_as_errors(gw, client, mock_upstream):
    mock_upstream.script("st-broken", [], then={"status": 200, "frames": 3, "break_after": 1})
    for _ in range(3):  # breaker_failure_threshold: 3
        with pytest.raises(openai.APIError) as broken:
            # closed on the way out: a stream the error left open is closed later by the garbage collector,
            # and that can happen inside httpcore's pool lock during another request, which then deadlocks
            with client.chat.completions.create(model="s-broken", messages=MESSAGES, stream=True) as stream:
                for _chunk in stream:
                    pass
        assert broken.value.code == "upstream_stream_error"
    assert mock_upstream.count("st-broken") == 3
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="s-broken", messages=MESSAGES, stream=True)
    assert refused.value.status_code == 503 and refused.value.code == "circuit_open"
    assert mock_upstream.count("st-broken") == 3  # no upstream call once open

    def broken_rows() -> list[dict]:
        return [r for r in usage_rows(gw.database_url) if r["model_used"] == "s-broken" and r["streamed"]]

    wait_for(lambda: len(broken_rows()) >= 4, 10, "the four requests' usage records")
    assert sorted((r["status"], r["error_code"]) for r in broken_rows()) == [(200, "upstream_stream_error")] * 3 + [
        (503, "circuit_open")
    ]


def test_a_client_that_leaves_mid_stream_charges_nothing(gw, mock_upstream):
    mock_upstream.script("st-slow", [], then={"status": 200, "frames": 50, "frame_delay_ms": 100})
    for _ in range(4):  # more than the threshold: none of them may count against the link
        with httpx.Client(timeout=20) as http:
            with http.stream(
                "POST",
                f"{gw.url}/v1/chat/completions",
                json={"model": "s-slow", "messages": MESSAGES, "stream": True},
                headers={"Authorization": f"Bearer {gw.api_key}"},
            ) as response:
                assert response.status_code == 200
                next(response.iter_raw())  # committed: the first content arrived; now hang up
    mock_upstream.script("st-slow", [], then={"status": 200, "frames": 1})
    chunks = list(
        openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20).chat.completions.create(
            model="s-slow", messages=MESSAGES, stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "stop"  # still served: the breaker stayed closed

    def slow_rows() -> list[dict]:
        return [r for r in usage_rows(gw.database_url) if r["model_used"] == "s-slow"]

    wait_for(lambda: len(slow_rows()) >= 5, 10, "the five streams' usage records")
    assert sorted(r["error_code"] for r in slow_rows()) == [""] + ["client_closed_request"] * 4


def test_a_stream_without_any_usage_is_recorded_with_estimated_tokens(gw, client, mock_upstream):
    mock_upstream.script("st-nousage", [], then={"status": 200, "frames": 8, "no_usage": True})
    prompt = "Tell me about switchboards and the operators who ran them. " * 4
    chunks = list(
        client.chat.completions.create(model="s-nousage", messages=[{"role": "user", "content": prompt}], stream=True)
    )
    relayed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert relayed == "".join(f"tok{i} " for i in range(8))

    def row() -> dict | None:
        rows = [r for r in usage_rows(gw.database_url) if r["model_used"] == "s-nousage"]
        return rows[-1] if rows else None

    wait_for(lambda: row() is not None, 10, "the stream's usage record")
    record = row()
    assert record["tokens_estimated"] in (True, 1)
    assert record["completion_tokens"] == -(-len(relayed) // 4)  # about four characters a token
    assert len(prompt) // 6 <= record["prompt_tokens"] <= len(prompt) // 2  # the preflight estimate
