"""AWS Bedrock end to end (docs/providers.md#bedrock): the official `openai` and `anthropic`
clients, a real gateway (daphne or uvicorn), the mock upstream's Bedrock runtime, which
verifies every SigV4 signature (body hash and session token included) with botocore's signer.
"""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

from tests.e2e.test_usage_e2e import usage_rows, wait_for
from tools.mock.bedrock import CREDENTIALS, TEXT, USAGE, demo_credentials

KEY_ID = "ASIAMOCKSWITCHBOARD"
SECRET, TOKEN = CREDENTIALS[KEY_ID]
UP = "anthropic.claude-3-haiku-20240307-v1:0"
CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 2
  breaker_cooldown_s: 600
providers:
  - name: mock-bedrock
    dialect: bedrock
    base_url: {mock}/bedrock?region=eu-central-1
    api_key_env: SWITCHBOARD_UPSTREAM_BEDROCK
  - name: mock-bedrock-wrong
    dialect: bedrock
    base_url: {mock}/bedrock?region=eu-central-1
    api_key_env: SWITCHBOARD_UPSTREAM_BEDROCK_WRONG
  - name: mock-claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: br
    provider: mock-bedrock
    upstream_model: {up}
    capabilities: [chat, streaming, tools]
    input_price_per_mtok: 3
    output_price_per_mtok: 15
  - id: br-throttled
    provider: mock-bedrock
    upstream_model: br.throttled-v1:0
    capabilities: [chat, streaming]
    fallbacks: [fb]
  - id: br-invalid
    provider: mock-bedrock
    upstream_model: br.invalid-v1:0
    capabilities: [chat, streaming]
    fallbacks: [fb]
  - id: br-down
    provider: mock-bedrock
    upstream_model: br.down-v1:0
    capabilities: [chat, streaming]
    fallbacks: [fb]
  - id: br-wrong-secret
    provider: mock-bedrock-wrong
    upstream_model: br.wrong-v1:0
    capabilities: [chat]
    fallbacks: [fb]
  - id: claude-down
    provider: mock-claude
    upstream_model: br-claude-down
    capabilities: [chat, streaming, tools]
    fallbacks: [br]
  - id: fb
    provider: mock
    upstream_model: br-fb
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
"""
HI = [{"role": "user", "content": "Hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    env = {
        "SWITCHBOARD_UPSTREAM_BEDROCK": f"{KEY_ID}:{SECRET}:{TOKEN}",
        "SWITCHBOARD_UPSTREAM_BEDROCK_WRONG": f"{KEY_ID}:not-the-secret:{TOKEN}",
    }
    return make_gateway(CONFIG.format(mock=mock_upstream.url, up=UP), env=env)


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def claude(gw):
    return anthropic.Anthropic(base_url=gw.url, api_key=gw.api_key, max_retries=0, timeout=20)


def bedrock_error(name: str, message: str | None = None) -> dict:
    return {"exception": name, **({"message": message} if message else {})}


# --- answers, signed ----------------------------------------------------------------------


def test_a_chat_completion_is_served_by_bedrock_with_a_verified_signature(client, gw, mock_upstream):
    raw = client.chat.completions.with_raw_response.create(
        model="br", messages=[{"role": "system", "content": "Be brief."}, *HI], max_tokens=50, temperature=0.1
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == TEXT
    assert answer.choices[0].finish_reason == "stop"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == USAGE
    assert (raw.headers["x-switchboard-provider-used"], raw.headers["x-switchboard-attempts"]) == ("mock-bedrock", "1")
    sent = mock_upstream.calls(UP)["requests"][-1]
    assert sent["path"] == f"/bedrock/model/{UP}/converse"
    assert sent["body"]["system"] == [{"text": "Be brief."}]
    assert sent["body"]["inferenceConfig"] == {"maxTokens": 50, "temperature": 0.1}
    auth = sent["headers"]["Authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/") and "/eu-central-1/bedrock/aws4_request" in auth
    assert "x-amz-content-sha256" in auth and "x-amz-security-token" in auth
    assert sent["headers"]["X-Amz-Security-Token"] == TOKEN


def test_a_stream_is_relayed_as_openai_chunks_with_bedrocks_usage(client, mock_upstream):
    chunks = list(
        client.chat.completions.create(model="br", messages=HI, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "tok0 tok1 tok2 "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == USAGE
    assert mock_upstream.calls(UP)["requests"][-1]["path"].endswith("/converse-stream")
    # without include_usage the client gets no usage frame (as from OpenAI)
    plain = list(client.chat.completions.create(model="br", messages=HI, stream=True))
    assert all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason == "stop"


def test_tools_round_trip_through_tool_use_and_tool_result(client, mock_upstream):
    first = client.chat.completions.create(model="br", messages=HI, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert (first.choices[0].finish_reason, call.function.name, call.function.arguments) == (
        "tool_calls",
        "lookup",
        '{"query":"mock"}',
    )
    history = [
        *HI,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    second = client.chat.completions.create(model="br", messages=history, tools=TOOLS)
    assert second.choices[0].message.content == TEXT
    sent = mock_upstream.calls(UP)["requests"][-1]["body"]
    assert sent["messages"][1]["content"][-1]["toolUse"]["toolUseId"] == call.id
    assert sent["messages"][2]["content"] == [{"toolResult": {"toolUseId": call.id, "content": [{"text": "42"}]}}]
    streamed = list(client.chat.completions.create(model="br", messages=HI, tools=TOOLS, stream=True))
    calls = [t for c in streamed if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert calls[0].function.name == "lookup"
    assert "".join(t.function.arguments for t in calls) == '{"query": "mock"}'


def test_the_anthropic_client_is_served_by_bedrock(claude):
    message = claude.messages.create(model="br", max_tokens=100, system="Be brief.", messages=HI)
    assert [(b.type, b.text) for b in message.content] == [("text", TEXT)]
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == ("end_turn", *USAGE)
    with claude.messages.stream(model="br", max_tokens=100, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "tok0 tok1 tok2 "
    assert (final.usage.input_tokens, final.usage.output_tokens) == USAGE
    tools = [{"name": "lookup", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
    called = claude.messages.create(model="br", max_tokens=100, messages=HI, tools=tools)
    assert called.stop_reason == "tool_use"
    assert (called.content[-1].name, called.content[-1].input) == ("lookup", {"query": "mock"})


def test_usage_records_carry_bedrocks_token_counts_and_cost(client, gw):
    marker = "usage-check-bedrock"
    client.chat.completions.create(model="br", messages=HI, user=marker)
    list(client.chat.completions.create(model="br", messages=HI, stream=True))
    rows = []

    def found() -> bool:
        rows[:] = [r for r in usage_rows(gw.database_url) if r["model_used"] == "br"]
        return any(r["streamed"] for r in rows) and any(not r["streamed"] for r in rows)

    wait_for(found, 10, "usage rows of a bedrock answer and stream")
    for row in rows:
        assert (row["provider"], row["status"]) == ("mock-bedrock", 200)
        assert (row["prompt_tokens"], row["completion_tokens"]) == USAGE
        assert not row["tokens_estimated"]
        assert float(row["cost"]) == pytest.approx((USAGE[0] * 3 + USAGE[1] * 15) / 1e6)


# --- errors of each class -----------------------------------------------------------------


def test_throttling_is_retried_then_fails_over(client, mock_upstream):
    mock_upstream.script("br.throttled-v1:0", [bedrock_error("ThrottlingException")])
    raw = client.chat.completions.with_raw_response.create(model="br-throttled", messages=HI)
    assert (raw.headers["x-switchboard-model-used"], raw.headers["x-switchboard-attempts"]) == ("br-throttled", "2")
    before = mock_upstream.count("br.throttled-v1:0")
    mock_upstream.script("br.throttled-v1:0", [], then=bedrock_error("ThrottlingException"))
    raw = client.chat.completions.with_raw_response.create(model="br-throttled", messages=HI)
    assert (raw.headers["x-switchboard-model-used"], raw.headers["x-switchboard-fallback"]) == ("fb", "upstream_429")
    assert mock_upstream.count("br.throttled-v1:0") == before + 2  # tried twice, then the fallback


def test_a_validation_error_is_the_clients_400_and_never_opens_the_breaker(client, mock_upstream):
    up = "br.invalid-v1:0"
    mock_upstream.script(up, [], then=bedrock_error("ValidationException", "messages: a turn is empty"))
    fallbacks = mock_upstream.count("br-fb")
    for _ in range(3):  # more than breaker_failure_threshold
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="br-invalid", messages=HI)
        error = caught.value.body
        assert (error["code"], error["type"], error["message"]) == (
            "upstream_client_error",
            "ValidationException",
            "messages: a turn is empty",
        )
    assert mock_upstream.count(up) == 3  # once each: not retried, and the third still reached it
    assert mock_upstream.count("br-fb") == fallbacks  # never failed over


def test_server_errors_charge_the_breaker_and_fail_over(client, mock_upstream):
    up = "br.down-v1:0"
    mock_upstream.script(
        up, [bedrock_error("InternalServerException")], then=bedrock_error("ServiceUnavailableException")
    )
    for _ in range(2):  # breaker_failure_threshold failed requests, each tried twice
        raw = client.chat.completions.with_raw_response.create(model="br-down", messages=HI)
        assert (raw.headers["x-switchboard-model-used"], raw.headers["x-switchboard-fallback"]) == (
            "fb",
            "upstream_5xx",
        )
    assert mock_upstream.count(up) == 4
    raw = client.chat.completions.with_raw_response.create(model="br-down", messages=HI)
    assert (raw.headers["x-switchboard-model-used"], raw.headers["x-switchboard-fallback"]) == ("fb", "circuit_open")
    assert mock_upstream.count(up) == 4  # the open breaker skipped it


def test_a_wrong_secret_is_refused_by_the_mock_and_is_not_a_breaker_failure(client, mock_upstream):
    up = "br.wrong-v1:0"
    for _ in range(3):
        with pytest.raises(openai.PermissionDeniedError) as caught:
            client.chat.completions.create(model="br-wrong-secret", messages=HI)
        error = caught.value.body
        assert (error["code"], error["type"]) == ("upstream_client_error", "InvalidSignatureException")
        assert error["message"].startswith("The request signature we calculated does not match")
    assert mock_upstream.count(up) == 3  # each reached the mock: the breaker stayed closed


def test_an_anthropic_model_down_falls_back_to_bedrock(client, claude, mock_upstream):
    mock_upstream.script("br-claude-down", [], then={"status": 529})
    raw = client.chat.completions.with_raw_response.create(model="claude-down", messages=HI)
    assert (raw.headers["x-switchboard-model-used"], raw.headers["x-switchboard-provider-used"]) == (
        "br",
        "mock-bedrock",
    )
    assert raw.parse().choices[0].message.content == TEXT
    message = claude.messages.with_raw_response.create(model="claude-down", max_tokens=50, messages=HI)
    assert message.headers["x-switchboard-model-used"] == "br"
    assert message.parse().content[0].text == TEXT
    with claude.messages.stream(model="claude-down", max_tokens=50, messages=HI) as stream:
        assert "".join(stream.text_stream) == "tok0 tok1 tok2 "


def test_the_demo_configuration_serves_bedrock_with_the_demos_credentials(make_gateway, mock_upstream):
    demo = Path(__file__).resolve().parents[2] / "routing" / "fixtures" / "demo.yaml"
    config = demo.read_text().replace("http://127.0.0.1:9001", mock_upstream.url)
    env = {"SWITCHBOARD_UPSTREAM_DEMO": "demo-upstream-key", "SWITCHBOARD_UPSTREAM_DEMO_BEDROCK": demo_credentials()}
    gw = make_gateway(config, org="demo", agent="demo-agent", env=env)
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)
    raw = client.chat.completions.with_raw_response.create(model="bedrock-claude", messages=HI)
    assert (raw.headers["x-switchboard-provider-used"], raw.parse().choices[0].message.content) == (
        "mock-bedrock",
        TEXT,
    )
