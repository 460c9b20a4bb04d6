"""`POST /v1/completions` end to end (docs/api.md#endpoints): legacy text completions.

Passed through to openai-dialect upstreams (answers and streams byte for byte) on the
same path as chat: policy, chain with retries and fallbacks, usage records. A model
of another dialect answers a 400 that says its provider does not serve them.
"""

from __future__ import annotations

import openai
import pytest

from tests.e2e.test_usage_e2e import usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
providers:
  - name: oa
    dialect: openai
    base_url: {mock}/v1
  - name: gem
    dialect: gemini
    base_url: {mock}/gemini/v1beta
    api_key_env: SWITCHBOARD_UPSTREAM_GEM
models:
  - id: txt
    provider: oa
    upstream_model: tc-txt
    capabilities: [completions, streaming]
  - id: txt-down
    provider: oa
    upstream_model: tc-down
    capabilities: [completions, streaming]
    fallbacks: [txt-fb]
  - id: txt-fb
    provider: oa
    upstream_model: tc-fb
    capabilities: [completions, streaming]
  - id: chat-only
    provider: oa
    upstream_model: tc-chat
    capabilities: [chat]
  - id: gem-chat
    provider: gem
    upstream_model: gemini-tc
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
"""
TEXT = "Hello from the mock upstream."


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_UPSTREAM_GEM": "AIza-mock"})


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.api_key, max_retries=0, timeout=20)


def _row(gw, request_id: str) -> dict:
    wait_for(lambda: any(r["request_id"] == request_id for r in usage_rows(gw.database_url)), 10, "usage row")
    return next(r for r in usage_rows(gw.database_url) if r["request_id"] == request_id)


def test_a_text_completion_is_passed_through_and_recorded(client, gw, mock_upstream):
    raw = client.completions.with_raw_response.create(model="txt", prompt="Say hello", max_tokens=20, temperature=0)
    answer = raw.parse()
    assert answer.object == "text_completion" and answer.choices[0].text == TEXT
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 7)
    sent = mock_upstream.calls("tc-txt")["requests"][-1]
    assert sent["path"] == "/v1/completions"
    assert sent["body"] == {"model": "tc-txt", "prompt": "Say hello", "max_tokens": 20, "temperature": 0}
    row = _row(gw, raw.headers["x-request-id"])
    assert (row["endpoint"], row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "completions",
        200,
        12,
        7,
    )


def test_a_streamed_completion_is_relayed_and_its_usage_recorded_without_showing_it(client, gw, mock_upstream):
    raw = client.completions.with_raw_response.create(model="txt", prompt="Say hello", stream=True)
    chunks = list(raw.parse())
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "tok0 tok1 tok2 "
    assert all(c.usage is None for c in chunks)  # the client did not ask for the usage frame
    sent = mock_upstream.calls("tc-txt")["requests"][-1]["body"]
    assert sent["stream_options"] == {"include_usage": True}  # the gateway asked for it, for the record
    row = _row(gw, raw.headers["x-request-id"])
    assert (row["streamed"], row["prompt_tokens"], row["completion_tokens"]) in ((True, 12, 7), (1, 12, 7))


def test_an_upstream_failure_falls_back_like_chat(client, mock_upstream):
    mock_upstream.script("tc-down", [], then={"status": 503})
    raw = client.completions.with_raw_response.create(model="txt-down", prompt="x")
    assert raw.parse().choices[0].text == TEXT
    assert raw.headers["x-switchboard-model-used"] == "txt-fb"
    assert raw.headers["x-switchboard-fallback"] == "upstream_5xx"
    assert mock_upstream.count("tc-down") == 2  # the try and its retry


def test_a_model_of_another_dialect_answers_a_clear_400(client, mock_upstream):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="gem-chat", prompt="x")
    body = info.value.body
    assert body["code"] == "unsupported_capability"
    assert "gemini dialect, which does not serve text completions" in body["message"]
    assert mock_upstream.count("gemini-tc") == 0


def test_an_openai_model_that_does_not_declare_completions_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="chat-only", prompt="x")
    assert info.value.body["code"] == "unsupported_capability" and "'completions'" in info.value.body["message"]


def test_a_malformed_prompt_names_the_field(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="txt", prompt=[{"not": "a prompt"}])  # type: ignore[list-item]
    assert info.value.body["code"] == "invalid_request" and info.value.body["param"] == "prompt[0]"
