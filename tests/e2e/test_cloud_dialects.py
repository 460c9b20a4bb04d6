"""Azure OpenAI, Gemini and Vertex AI end to end (docs/providers.md).

A real gateway server, the real mock upstream speaking each cloud API (paths, auth,
stream framing, error shapes, usage fields), the official `openai` client (and the
`anthropic` client for Anthropic-on-Vertex). Each dialect: answers, streams, tools,
each error class (rate limit retried, validation a 400 without a breaker charge,
server error a breaker failure with fallback), usage recorded from the provider's own
fields, a fallback across dialects, and Vertex's service-account token exchange.
"""

from __future__ import annotations

import json
import uuid

import anthropic
import httpx
import openai
import pytest

from tests.e2e.test_usage_e2e import usage_rows, wait_for
from tools.mock.clouds import new_service_account

CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 2
  breaker_cooldown_s: 120
providers:
  - name: az
    dialect: azure_openai
    base_url: {mock}/azure/openai?api-version=2024-10-21
    api_key_env: SWITCHBOARD_UPSTREAM_AZ
  - name: az-wrong
    dialect: azure_openai
    base_url: {mock}/azure/openai
    api_key_env: SWITCHBOARD_UPSTREAM_AZ_WRONG
  - name: gem
    dialect: gemini
    base_url: {mock}/gemini/v1beta
    api_key_env: SWITCHBOARD_UPSTREAM_GEM
  - name: vx
    dialect: vertex
    base_url: {mock}/vertex/v1/projects/proj-1/locations/us-east5
    api_key_env: SWITCHBOARD_UPSTREAM_VX
  - name: oa
    dialect: openai
    base_url: {mock}/v1
  - name: claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
models:
{models}
  - id: fb
    provider: oa
    upstream_model: cd-fallback
    capabilities: [chat, streaming, tools]
  - id: az-denied
    provider: az-wrong
    upstream_model: cd-az-denied
    capabilities: [chat]
  - id: az-embed
    provider: az
    upstream_model: cd-az-embed
    capabilities: [embeddings]
  - id: az-resp
    provider: az
    upstream_model: cd-az-resp
    capabilities: [responses]
  - id: gem-embed
    provider: gem
    upstream_model: text-embedding-004
    capabilities: [embeddings]
  - id: claude-down
    provider: claude
    upstream_model: cd-claude-down
    capabilities: [chat, streaming, tools]
    fallbacks: [vx-claude-fb]
  - id: vx-claude-fb
    provider: vx
    upstream_model: claude-fb@20250514
    capabilities: [chat, streaming, tools]
orgs:
  - name: acme
    agents:
      - name: bot
"""
# dialect case -> (provider, upstream model prefix, prompt tokens, completion tokens the mock reports)
CASES = {
    "azure": ("az", "cd-az", 12, 7),
    "gemini": ("gem", "gemini-cd", 11, 6),
    "vertex": ("vx", "gemini-vx", 11, 6),
    "vertex-claude": ("vx", "claude-vx", 12, 7),
}
ROLES = ("chat", "rl", "bad", "down", "use", "tool", "stream")
TEXT = "Hello from the mock upstream."
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
each = pytest.mark.parametrize("case", sorted(CASES))


def upstream(case: str, role: str) -> str:
    return f"{CASES[case][1]}-{role}"


def _models() -> str:
    lines = []
    for case, (provider, _, _, _) in CASES.items():
        for role in ROLES:
            lines += [
                f"  - id: {case}-{role}",
                f"    provider: {provider}",
                f"    upstream_model: {upstream(case, role)}",
                "    capabilities: [chat, streaming, tools]",
                "    fallbacks: [fb]",
            ]
    return "\n".join(lines)


def service_account(mock_url: str) -> tuple[str, str]:
    """(service-account JSON, public key PEM) with a fresh key, its token_uri the mock's."""
    email = f"sb-{uuid.uuid4().hex[:6]}@proj-1.iam.gserviceaccount.com"
    return new_service_account(f"{mock_url}/vertex/token", email)


@pytest.fixture(scope="module")
def vertex_account(mock_upstream):
    sa, public = service_account(mock_upstream.url)
    email = json.loads(sa)["client_email"]
    mock_upstream.client.post("/_control/vertex", json={"client_email": email, "public_key": public})
    return sa


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream, vertex_account):
    env = {
        "SWITCHBOARD_UPSTREAM_AZ": "az-key-0123456789abcdef",
        "SWITCHBOARD_UPSTREAM_AZ_WRONG": "bad-key",
        "SWITCHBOARD_UPSTREAM_GEM": "AIza-mock-key",
        "SWITCHBOARD_UPSTREAM_VX": vertex_account,
    }
    return make_gateway(CONFIG.format(mock=mock_upstream.url, models=_models()), env=env)


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.api_key, max_retries=0, timeout=20)


def last_request(mock_upstream, model: str) -> dict:
    return mock_upstream.calls(model)["requests"][-1]


# --- answers, streams, tools ---------------------------------------------------------


@each
def test_an_answer_is_translated_with_the_providers_usage(client, gw, mock_upstream, case):
    raw = client.chat.completions.with_raw_response.create(
        model=f"{case}-chat", messages=[{"role": "system", "content": "Be brief."}, *HI], max_tokens=50
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == TEXT
    assert answer.choices[0].finish_reason == "stop"
    _, _, prompt, completion = CASES[case]
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (prompt, completion)
    sent = last_request(mock_upstream, upstream(case, "chat"))
    if case == "azure":
        assert sent["path"] == f"/azure/openai/deployments/{upstream(case, 'chat')}/chat/completions"
        assert sent["headers"]["api-key"] == "az-key-0123456789abcdef"
    elif case == "vertex-claude":
        assert sent["path"].endswith(f"/publishers/anthropic/models/{upstream(case, 'chat')}:rawPredict")
        assert sent["body"]["anthropic_version"] == "vertex-2023-10-16" and "model" not in sent["body"]
        assert sent["body"]["system"] == "Be brief."
    else:
        assert sent["path"].endswith(f"{upstream(case, 'chat')}:generateContent")
        assert sent["body"]["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert sent["body"]["generationConfig"]["maxOutputTokens"] == 50
        header = "x-goog-api-key" if case == "gemini" else "Authorization"
        assert header in sent["headers"]
    # the usage record carries the provider's own token counts
    request_id = raw.headers["x-request-id"]
    wait_for(lambda: any(r["request_id"] == request_id for r in usage_rows(gw.database_url)), 10, "usage row")
    row = next(r for r in usage_rows(gw.database_url) if r["request_id"] == request_id)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)


@each
def test_a_stream_is_translated_to_chunks_with_usage(client, mock_upstream, case):
    stream = client.chat.completions.create(
        model=f"{case}-stream", messages=HI, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 "
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    _, _, prompt, completion = CASES[case]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and (usage[-1].prompt_tokens, usage[-1].completion_tokens) == (prompt, completion)
    path = last_request(mock_upstream, upstream(case, "stream"))["path"]
    ending = {"azure": "/chat/completions", "vertex-claude": ":streamRawPredict"}
    assert path.endswith(ending.get(case, ":streamGenerateContent"))


@each
@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_call_comes_back_as_openai_tool_calls(client, mock_upstream, case, streamed):
    if not streamed:
        answer = client.chat.completions.create(model=f"{case}-tool", messages=HI, tools=TOOLS)
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        name, arguments = call.function.name, call.function.arguments
    else:
        chunks = list(client.chat.completions.create(model=f"{case}-tool", messages=HI, tools=TOOLS, stream=True))
        deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or ())]
        name = next(d.function.name for d in deltas if d.function and d.function.name)
        arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert name == "lookup" and json.loads(arguments) == {"query": "mock"}
    # the answer goes back as the provider's function response
    follow = [
        *HI,
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found it"},
    ]
    assert client.chat.completions.create(model=f"{case}-tool", messages=follow, tools=TOOLS).choices[0].message.content
    sent = last_request(mock_upstream, upstream(case, "tool"))["body"]
    if case in ("gemini", "vertex"):
        response = sent["contents"][-1]["parts"][0]["functionResponse"]
        assert response == {"name": "lookup", "response": {"content": "found it"}}
        assert sent["tools"][0]["functionDeclarations"][0]["name"] == "lookup"


# --- error classes -----------------------------------------------------------------------


def _rate_limit_step(case: str) -> dict:
    if case == "azure":  # Azure's finer retry-after-ms
        return {"status": 429, "headers": {"retry-after-ms": "20"}}
    return {"status": 429}


@each
def test_a_rate_limit_is_retried(client, mock_upstream, case):
    mock_upstream.script(upstream(case, "rl"), [_rate_limit_step(case)])
    raw = client.chat.completions.with_raw_response.create(model=f"{case}-rl", messages=HI)
    assert raw.parse().choices[0].message.content == TEXT
    assert "x-switchboard-fallback" not in raw.headers
    assert mock_upstream.count(upstream(case, "rl")) == 2


@each
def test_a_validation_error_is_the_clients_400_and_no_breaker_failure(client, mock_upstream, case):
    name = upstream(case, "bad")
    mock_upstream.script(name, [{"status": 400}, {"status": 400}, {"status": 400}])
    for _ in range(3):  # more than the breaker threshold: a client error never opens it
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=f"{case}-bad", messages=HI)
        assert info.value.status_code == 400  # with the upstream's own error object
    assert mock_upstream.count(name) == 3  # each went upstream once: no retry, no fallback, no open breaker
    assert client.chat.completions.create(model=f"{case}-bad", messages=HI).choices[0].message.content == TEXT


@each
def test_a_server_error_is_a_breaker_failure_and_falls_back(client, mock_upstream, case):
    name = upstream(case, "down")
    mock_upstream.script(name, [], then={"status": 500})
    for _ in range(2):  # the breaker threshold: two failed requests
        raw = client.chat.completions.with_raw_response.create(model=f"{case}-down", messages=HI)
        assert raw.headers["x-switchboard-fallback"] == "upstream_5xx"
        assert raw.headers["x-switchboard-model-used"] == "fb"
    tried = mock_upstream.count(name)
    assert tried == 4  # each request: the try and its retry
    raw = client.chat.completions.with_raw_response.create(model=f"{case}-down", messages=HI)
    assert raw.headers["x-switchboard-fallback"] == "circuit_open"
    assert mock_upstream.count(name) == tried  # the open breaker kept the request away


def test_azure_content_filter_refusals_are_client_errors(client, mock_upstream):
    name = upstream("azure", "use")
    body = {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {"hate": {"filtered": True}},
            },
        }
    }
    mock_upstream.script(name, [{"status": 400, "body": json.dumps(body)}] * 3)
    for _ in range(3):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="azure-use", messages=HI)
        assert info.value.body["code"] == "content_filter"  # Azure's own error object
        assert "content management policy" in info.value.body["message"]
    assert mock_upstream.count(name) == 3
    assert client.chat.completions.create(model="azure-use", messages=HI).choices[0].message.content == TEXT


@pytest.mark.parametrize("case", ["gemini", "vertex"])
def test_a_gemini_safety_block_is_a_content_filter_refusal(client, mock_upstream, case):
    name = upstream(case, "use")
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}
    stopped = {
        "candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "SAFETY"}],
        "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4},
    }
    mock_upstream.script(name, [{"body": json.dumps(blocked)}] * 3 + [{"body": json.dumps(stopped)}])
    for _ in range(3):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=f"{case}-use", messages=HI)
        assert "blocked the prompt (SAFETY)" in info.value.body["message"]
    answer = client.chat.completions.create(model=f"{case}-use", messages=HI)  # the breaker stayed closed
    assert answer.choices[0].finish_reason == "content_filter"


def test_a_wrong_azure_key_is_the_upstreams_401_not_a_breaker_failure(client, mock_upstream):
    for _ in range(3):
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="az-denied", messages=HI)
    assert mock_upstream.count("cd-az-denied") == 3


def test_azure_and_gemini_embeddings(client, mock_upstream):
    for model in ("az-embed", "gem-embed"):
        answer = client.embeddings.create(model=model, input=["one", "two"])
        assert len(answer.data) == 2 and len(answer.data[0].embedding) == 8
    assert last_request(mock_upstream, "text-embedding-004")["path"].endswith(":batchEmbedContents")


def test_azure_responses_go_to_the_resource_with_the_deployment_as_model(client, mock_upstream):
    answer = client.responses.create(model="az-resp", input="Hello")
    assert answer.output_text
    sent = last_request(mock_upstream, "cd-az-resp")
    assert sent["path"] == "/azure/openai/responses" and sent["body"]["model"] == "cd-az-resp"


# --- across dialects, and Anthropic-on-Vertex for Anthropic clients ------------------------


def test_anthropic_down_falls_back_to_claude_on_vertex(client, gw, mock_upstream):
    mock_upstream.script("cd-claude-down", [], then={"status": 503})
    raw = client.chat.completions.with_raw_response.create(model="claude-down", messages=HI)
    assert raw.parse().choices[0].message.content == TEXT
    assert raw.headers["x-switchboard-model-used"] == "vx-claude-fb"
    assert raw.headers["x-switchboard-provider-used"] == "vx"
    messages = anthropic.Anthropic(base_url=gw.url, api_key=gw.api_key, max_retries=0, timeout=20)
    answer = messages.messages.create(model="claude-down", max_tokens=64, messages=HI)
    assert answer.content[0].text == TEXT and answer.usage.input_tokens == 12
    with messages.messages.stream(model="vx-claude-fb", max_tokens=64, messages=HI) as stream:
        assert "".join(stream.text_stream) == "tok0 tok1 tok2 "
        assert stream.get_final_message().usage.output_tokens == 7
    # Anthropic clients get a passthrough to Claude on Vertex: their own fields reach it
    thinking = {"type": "enabled", "budget_tokens": 1024}
    answer = messages.messages.create(model="vx-claude-fb", max_tokens=2048, messages=HI, thinking=thinking)
    assert answer.content[0].text == TEXT
    sent = last_request(mock_upstream, "claude-fb@20250514")
    assert sent["path"].endswith("/publishers/anthropic/models/claude-fb@20250514:rawPredict")
    assert sent["body"]["thinking"] == thinking and sent["body"]["anthropic_version"] == "vertex-2023-10-16"
    assert "model" not in sent["body"] and sent["headers"]["Authorization"].startswith("Bearer ya29.")


# --- Vertex's service-account token ----------------------------------------------------------


def test_vertex_exchanges_one_token_for_many_requests_and_never_logs_it(client, gw, mock_upstream, vertex_account):
    for _ in range(3):
        client.chat.completions.create(model="vertex-chat", messages=HI)
    state = mock_upstream.client.get("/_control/vertex").json()
    assert state["exchanges"] == 1  # every earlier vertex request of this gateway used the same token
    token = last_request(mock_upstream, upstream("vertex", "chat"))["headers"]["Authorization"].removeprefix("Bearer ")
    assert token.startswith("ya29.mock-")
    logs = gw.logs()
    assert token not in logs
    assert json.loads(vertex_account)["private_key"].splitlines()[1] not in logs
    models = httpx.get(gw.url + "/v1/models", headers={"Authorization": f"Bearer {gw.api_key}"}).text
    assert token not in models
