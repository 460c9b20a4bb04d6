"""The azure_openai, gemini and vertex dialects in pieces (end to end: tests/e2e/test_cloud_dialects.py)."""

from __future__ import annotations

import asyncio
import json
import logging

import orjson
import pytest

from routing.core.failures import FailureKind, UpstreamFailure, failure_from_response
from routing.runtime.observe import health
from routing.upstream.dialects import get_dialect, vertex
from routing.upstream.translate.chat_to_gemini import gemini_request
from tests.e2e.test_cloud_dialects import service_account
from tests.upstream.conftest import model, provider
from tools.mock import clouds
from tools.mock.upstream import start_mock

HI = [{"role": "user", "content": "hi"}]


# --- azure_openai ----------------------------------------------------------------------


def test_azure_urls_name_the_deployment_and_the_api_version():
    dialect = get_dialect("azure_openai")
    spec = model("my-deploy", provider(dialect="azure_openai"))
    base = "https://res.openai.azure.com/openai"
    chat = dialect.build_request("chat", {"messages": HI}, spec, base, "k" * 32, False)
    assert chat.url == f"{base}/deployments/my-deploy/chat/completions?api-version=2024-10-21"
    assert chat.headers["api-key"] == "k" * 32 and "Authorization" not in chat.headers
    pinned = dialect.build_request("embeddings", {"input": "x"}, spec, base + "?api-version=2025-01-01", None, False)
    assert pinned.url == f"{base}/deployments/my-deploy/embeddings?api-version=2025-01-01"
    responses = dialect.build_request("responses", {"input": "x"}, spec, base, None, False)
    assert (
        responses.url.startswith(f"{base}/responses?api-version=")
        and orjson.loads(responses.body)["model"] == "my-deploy"
    )


def test_an_entra_id_token_is_sent_as_a_bearer_token():
    token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwcyJ9.c2lnbmF0dXJl"
    headers = get_dialect("azure_openai").auth_headers(token)
    assert headers == {"Authorization": "Bearer " + token}


def test_retry_after_ms_is_honoured_before_retry_after():
    failure = failure_from_response(429, {"retry-after-ms": "1500", "Retry-After": "9"}, b"{}")
    assert failure.kind is FailureKind.UPSTREAM_429 and failure.retry_after_s == 1.5
    assert failure_from_response(429, {"Retry-After": "9"}, b"{}").retry_after_s == 9
    assert failure_from_response(503, {"retry-after-ms": "nonsense", "Retry-After": "2"}, b"").retry_after_s == 2


def test_an_azure_content_filter_400_is_a_client_error_not_a_breaker_failure():
    body = orjson.dumps({"error": {"code": "content_filter", "message": "filtered", "innererror": {}}})
    failure = failure_from_response(400, {}, body)
    assert failure.kind is FailureKind.CONTENT_FILTER and not failure.is_provider_fault


# --- gemini shapes ------------------------------------------------------------------------


def test_gemini_request_translates_images_schema_tools_and_sampling():
    body = {
        "messages": [
            {"role": "developer", "content": "Answer in JSON."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is it?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.webp"}},
                ],
            },
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": "END",
        "max_completion_tokens": 99,
    }
    out = gemini_request(body)
    assert out["systemInstruction"] == {"parts": [{"text": "Answer in JSON."}]}
    parts = out["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
    assert parts[2] == {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cat.webp"}}
    config = out["generationConfig"]
    assert config["responseMimeType"] == "application/json" and config["responseJsonSchema"] == {"type": "object"}
    assert (config["temperature"], config["topP"], config["stopSequences"], config["maxOutputTokens"]) == (
        0.3,
        0.9,
        ["END"],
        99,
    )
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}


@pytest.mark.parametrize(("choice", "mode"), [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")])
def test_gemini_tool_choice_strings_map_to_their_calling_mode(choice, mode):
    """`required` must be ANY (a function call is forced); AUTO would let Gemini answer in text."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    out = gemini_request({"messages": HI, "tools": tools, "tool_choice": choice})
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": mode}}


@pytest.mark.parametrize(("reason", "finish"), [("MAX_TOKENS", "length"), ("RECITATION", "content_filter")])
def test_gemini_finish_reasons(reason, finish):
    data = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}
    parsed = get_dialect("gemini").parse_response("chat", orjson.dumps(data), model("g", provider(dialect="gemini")))
    assert orjson.loads(parsed.body)["choices"][0]["finish_reason"] == finish


def test_a_gemini_prompt_block_is_a_content_filter_failure():
    data = orjson.dumps({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})
    with pytest.raises(UpstreamFailure) as info:
        get_dialect("gemini").parse_response("chat", data, model("g", provider(dialect="gemini")))
    assert info.value.kind is FailureKind.CONTENT_FILTER and info.value.status == 400
    assert not info.value.is_provider_fault


# --- vertex service-account tokens ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def token_endpoint():
    runner, port = await start_mock()
    root = f"http://127.0.0.1:{port}"
    sa, public = service_account(root)
    state = runner.app[clouds.VERTEX]
    state["keys"][json.loads(sa)["client_email"]] = public
    try:
        yield sa, state
    finally:
        await runner.cleanup()


async def test_one_exchange_serves_concurrent_requests_and_is_refreshed_before_expiry(token_endpoint, caplog):
    sa, state = token_endpoint
    state["expires_in"] = 3600
    clock = Clock()
    tokens = vertex.ServiceAccountTokens(clock=clock)
    caplog.set_level(logging.DEBUG)
    first = await asyncio.gather(*(tokens.token(sa, "vx") for _ in range(5)))
    assert len(set(first)) == 1 and state["exchanges"] == 1 and first[0] in state["tokens"]
    clock.now += 3600 - 310  # 310 s before expiry: still fresh
    assert await tokens.token(sa, "vx") == first[0] and state["exchanges"] == 1
    clock.now += 20  # 290 s before expiry, within the 5 minutes' margin: refreshed before it lapses
    second = await tokens.token(sa, "vx")
    assert second != first[0] and state["exchanges"] == 2
    logged = caplog.text
    assert first[0] not in logged and second not in logged
    assert json.loads(sa)["private_key"].splitlines()[1] not in logged


async def test_a_refused_exchange_is_an_authentication_failure_without_secrets_or_addresses(token_endpoint, caplog):
    sa, state = token_endpoint
    state["keys"].clear()  # the mock no longer knows the key: invalid_grant
    caplog.set_level(logging.WARNING, "switchboard.upstream")
    with pytest.raises(UpstreamFailure) as info:
        await vertex.ServiceAccountTokens().token(sa, "vx")
    assert info.value.status == 401 and not info.value.is_provider_fault and not info.value.is_retryable
    message = info.value.message
    assert "could not be exchanged for an access token" in message and "operator's log" in message
    port = json.loads(sa)["token_uri"].split(":")[2].split("/")[0]
    assert "invalid_grant" not in message and "127.0.0.1" not in message and port not in message
    assert "/vertex/token" not in message and "RefreshError" not in message
    assert json.loads(sa)["private_key"].splitlines()[1] not in message
    # The operators' log keeps the detail, in one line, without the key.
    lines = [r.getMessage() for r in caplog.records if "token exchange" in r.getMessage()]
    assert len(lines) == 1 and "invalid_grant" in lines[0] and "127.0.0.1" not in message
    assert json.loads(sa)["private_key"].splitlines()[1] not in caplog.text


async def test_a_secret_that_is_not_a_service_account_is_refused():
    with pytest.raises(UpstreamFailure) as info:
        await vertex.ServiceAccountTokens().token("sk-not-json", "vx")
    assert "not a service-account JSON" in info.value.message and "sk-not-json" not in info.value.message


async def test_the_vertex_probe_sends_an_access_token():
    fake = vertex.ServiceAccountTokens(exchange=lambda info: ("ya29.probe", 3600.0))
    sa = json.dumps({"client_email": "a@b", "private_key": "k", "token_uri": "http://127.0.0.1:9/token"})
    prov = provider(dialect="vertex", api_key=sa, base_url="http://127.0.0.1:9/v1/projects/p/locations/l")
    headers = await health._probe_credentials(prov, health.health_url(prov), fake)  # noqa: SLF001
    assert headers == {"Authorization": "Bearer ya29.probe"}
