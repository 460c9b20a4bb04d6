"""Streams end to end (docs/resilience.md#r6, docs/metrics.md#usage-records): real server, real mock, openai client.

The mock sends OpenAI's role-only first chunk, as real servers do; a stream commits
only at the first content frame, so a failure right after the role chunk still fails
over. Streams whose client did not ask for usage still get their tokens recorded.
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
  breaker_failure_threshold: 50
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
    assert all(c.model == "st-fb" for c in chunks)
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
    assert through == direct  # the client asked for usage: every frame, the role chunk and usage included


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
