"""The /v1 request path in-process: errors in the contract's shape, headers, no database."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application

MESSAGES = [{"role": "user", "content": "hello"}]


def error_code(response) -> str:
    return response.json()["error"]["code"]


@pytest.mark.django_db
def test_request_path_makes_no_database_queries(django_assert_num_queries):
    """A full proxied request (auth, policy, chain, upstream call, accounting) runs zero queries."""

    async def one_request() -> httpx.Response:
        from tools.mock.upstream import start_mock

        runner, port = await start_mock(0)
        live.swap(build_snapshot(document(f"http://127.0.0.1:{port}"), key_rows(), {}, version=1))
        try:
            transport = httpx.ASGITransport(app=gateway_application)
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                return await client.post(
                    "/v1/chat/completions",
                    json={"model": "fast", "messages": MESSAGES},
                    headers={"Authorization": f"Bearer {API_KEY}"},
                )
        finally:
            from routing.runtime.process import current

            upstream_transport = current().transport

            await upstream_transport.aclose()
            await runner.cleanup()

    with django_assert_num_queries(0):
        response = asyncio.run(one_request())
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "chat-a"


async def test_health_answers_without_io(gateway):
    response = await gateway.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_missing_and_unknown_keys_are_401_invalid_api_key(gateway):
    response = await gateway.post(
        "/v1/chat/completions", json={"model": "fast", "messages": MESSAGES}, headers={"Authorization": ""}
    )
    assert response.status_code == 401 and error_code(response) == "invalid_api_key"
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": MESSAGES},
        headers={"Authorization": "Bearer sb-nope"},
    )
    assert response.status_code == 401 and error_code(response) == "invalid_api_key"
    assert "x-request-id" in response.headers


async def test_expired_key_is_401(gateway, upstream):
    rows = key_rows()
    rows[0]["expires_at"] = 1.0
    live.swap(build_snapshot(document(upstream), rows, {}, version=2))
    response = await gateway.post("/v1/chat/completions", json={"model": "fast", "messages": MESSAGES})
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"model": "fast", "messages": "hi"}', "messages"),
        (b'{"model": "fast", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', "stream"),
    ],
)
async def test_bad_bodies_are_400_invalid_request_naming_the_field(gateway, content, param):
    response = await gateway.post("/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == "invalid_request"
    assert body["param"] == param
    assert body["message"]


async def test_body_over_the_limit_is_413(gateway, settings):
    settings.SWITCHBOARD_MAX_BODY_BYTES = 100
    response = await gateway.post(
        "/v1/chat/completions", json={"model": "fast", "messages": [{"role": "user", "content": "x" * 200}]}
    )
    assert response.status_code == 413 and error_code(response) == "request_too_large"


async def test_no_model_and_no_default_is_400_model_required(gateway):
    response = await gateway.post("/v1/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 400 and error_code(response) == "model_required"


async def test_agent_default_model_is_used_when_the_body_names_none(gateway, upstream):
    live.swap(build_snapshot(document(upstream), key_rows("defaulted"), {}, version=3))
    response = await gateway.post("/v1/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "chat-a"


async def test_unknown_model_is_404_and_denied_model_is_403(gateway):
    response = await gateway.post("/v1/chat/completions", json={"model": "nope", "messages": MESSAGES})
    assert response.status_code == 404 and error_code(response) == "model_not_found"
    response = await gateway.post("/v1/chat/completions", json={"model": "vendor/secret", "messages": MESSAGES})
    assert response.status_code == 403 and error_code(response) == "model_denied"


async def test_models_list_is_filtered_by_org_policy(gateway):
    response = await gateway.get("/v1/models")
    ids = {item["id"] for item in response.json()["data"]}
    assert ids == {"chat-a", "chat-b", "embed-a", "fast"}


async def test_a_streamed_responses_call_to_a_chat_only_model_is_served_by_translation_to_chat(gateway):
    """An OpenAI-compatible server that speaks only chat (llama.cpp, vLLM): Codex still gets Responses events."""
    response = await gateway.post("/v1/responses", json={"model": "chat-a", "input": "hi", "stream": True})
    assert response.status_code == 200, response.text
    events = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert "response.output_text.delta" in events
    no_model = await gateway.post("/v1/responses", json={"model": "embed-a", "input": "hi"})
    assert no_model.status_code == 400 and error_code(no_model) == "unsupported_capability"


async def test_idempotency_key_on_a_stream_is_rejected(gateway):
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": MESSAGES, "stream": True},
        headers={"Idempotency-Key": "k1"},
    )
    assert response.status_code == 400 and error_code(response) == "idempotency_stream_conflict"


async def test_prompt_too_long_for_the_primary_is_served_by_the_larger_fallback(gateway):
    long_prompt = [{"role": "user", "content": "word " * 2000}]
    response = await gateway.post("/v1/chat/completions", json={"model": "chat-a", "messages": long_prompt})
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "chat-b"
    assert response.headers["x-switchboard-fallback"] == "context_length"


async def test_capability_no_link_has_is_400_unsupported_capability(gateway):
    response = await gateway.post("/v1/embeddings", json={"model": "chat-a", "input": "hi"})
    assert response.status_code == 400 and error_code(response) == "unsupported_capability"


async def test_client_request_id_is_echoed_sanitised(gateway):
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": MESSAGES},
        headers={"X-Request-Id": "abc-123<script>"},
    )
    assert response.headers["x-request-id"] == "abc-123script"


async def test_unknown_path_is_404_in_the_error_shape(gateway):
    response = await gateway.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("extra", [{"type": {}}, {"type": ["image_url"]}, {"content": "hi", "type": [1]}])
async def test_unhashable_values_in_pass_through_fields_are_served_not_500(gateway, extra):
    """Fields the API does not define pass through unchecked; nothing on the way may trip on them."""
    message = {"role": "user", "content": "hi", **extra}
    response = await gateway.post("/v1/chat/completions", json={"model": "fast", "messages": [message]})
    assert response.status_code == 200, response.text
