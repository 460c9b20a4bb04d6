"""OpenAI-compatible and Ollama dialects against the mock: passthrough, usage, errors."""

from __future__ import annotations

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects import get_dialect
from tests.upstream.conftest import call, model, model_at, provider, sse_payloads, stream


async def test_chat_request_replaces_only_the_model_and_keeps_every_other_field(mock, transport):
    spec = model_at(mock, "openai", "gpt-up")
    body = {
        "model": "public-name",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "response_format": {"type": "json_object"},
        "some_new_openai_field": {"nested": [1, 2]},
    }
    await call(transport, spec, "chat", body, api_key="sk-shared")
    got = mock.state.calls("gpt-up")["requests"][0]
    assert got["path"] == "/v1/chat/completions"
    assert got["body"] == {**body, "model": "gpt-up"}
    assert list(got["body"]) == list(body)  # field order kept
    assert got["headers"]["Authorization"] == "Bearer sk-shared"
    assert body["model"] == "public-name"  # the client's dict is not mutated (fallback links reuse it)


async def test_byo_key_and_base_url_are_what_the_upstream_sees(mock, transport):
    spec = model("gpt-up", provider(base_url="http://127.0.0.1:9/v1"))
    await call(transport, spec, "chat", {"messages": []}, api_key="sk-org-acme", base_url=mock.base("openai"))
    got = mock.state.calls("gpt-up")["requests"][0]
    assert got["headers"]["Authorization"] == "Bearer sk-org-acme"


async def test_no_key_means_no_authorization_header(mock, transport):
    await call(transport, model_at(mock, "openai", "gpt-up"), "chat", {"messages": []})
    headers = {k.lower() for k in mock.state.calls("gpt-up")["requests"][0]["headers"]}
    assert "authorization" not in headers


async def test_chat_answer_is_passed_through_byte_for_byte_with_usage(mock, transport):
    parsed = await call(transport, model_at(mock, "openai", "gpt-up"), "chat", {"messages": []})
    mock.state.model("gpt-up").steps.append(
        {"body": '{"id": "x",  "usage": {"prompt_tokens": 3, "completion_tokens": 4}}'}
    )
    odd = await call(transport, model_at(mock, "openai", "gpt-up"), "chat", {"messages": []})
    assert orjson.loads(parsed.body)["model"] == "gpt-up"
    assert parsed.usage == (12, 7)
    assert odd.body == b'{"id": "x",  "usage": {"prompt_tokens": 3, "completion_tokens": 4}}'
    assert odd.usage == (3, 4)


async def test_embeddings_rerank_and_responses_reach_their_paths_with_usage(mock, transport):
    spec = model_at(mock, "openai", "m-up")
    emb = await call(transport, spec, "embeddings", {"input": ["a b", "c"]})
    rr = await call(transport, spec, "rerank", {"query": "cat", "documents": ["dog", "cat food"], "top_n": 1})
    resp = await call(transport, spec, "responses", {"input": "hi", "metadata": {"k": "v"}})
    paths = [r["path"] for r in mock.state.calls("m-up")["requests"]]
    assert paths == ["/v1/embeddings", "/v1/rerank", "/v1/responses"]
    assert emb.usage == (3, None)
    assert orjson.loads(rr.body)["results"][0]["index"] == 1
    assert resp.usage == (12, 7)
    assert mock.state.calls("m-up")["requests"][2]["body"]["metadata"] == {"k": "v"}


async def test_stream_is_relayed_unchanged(mock, transport):
    spec = model_at(mock, "openai", "gpt-up")
    body = {"messages": [], "stream": True, "stream_options": {"include_usage": True}}
    raw = await stream(transport, spec, body)
    sent = mock.state.calls("gpt-up")["requests"][0]["body"]
    assert sent["stream_options"] == {"include_usage": True} and sent["stream"] is True
    assert raw.endswith(b"data: [DONE]\n\n")
    assert orjson.loads(sse_payloads(raw)[-2])["usage"]["completion_tokens"] == 7


def test_translate_stream_is_identity():
    chunks = object()
    assert get_dialect("openai").translate_stream(chunks, model()) is chunks  # type: ignore[arg-type]
    assert get_dialect("ollama").translate_stream(chunks, model()) is chunks  # type: ignore[arg-type]


async def test_2xx_with_invalid_json_is_invalid_body(mock, transport):
    spec = model_at(mock, "openai", "gpt-up")
    mock.state.model("gpt-up").steps.extend([{"invalid_json": True}, {"body": "[1, 2]"}])
    for _ in range(2):
        with pytest.raises(UpstreamFailure) as info:
            await call(transport, spec, "chat", {"messages": []})
        assert info.value.kind is FailureKind.INVALID_BODY
        assert info.value.is_provider_fault and not info.value.is_retryable


@pytest.mark.parametrize(
    ("step", "kind"),
    [
        ({"status": 500}, FailureKind.UPSTREAM_5XX),
        ({"status": 503}, FailureKind.UPSTREAM_5XX),
        ({"status": 408}, FailureKind.UPSTREAM_408),
        (
            {"status": 404, "body": '{"error": {"message": "no such model", "type": "invalid_request_error"}}'},
            FailureKind.UPSTREAM_4XX,
        ),
        (
            {"status": 400, "body": '{"error": {"message": "too long", "code": "context_length_exceeded"}}'},
            FailureKind.CONTEXT_LENGTH,
        ),
    ],
)
async def test_error_statuses_are_classified(mock, transport, step, kind):
    spec = model_at(mock, "openai", "gpt-up")
    mock.state.model("gpt-up").steps.append(step)
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, spec, "chat", {"messages": []})
    assert info.value.kind is kind
    assert info.value.status == step["status"]


async def test_429_carries_retry_after(mock, transport):
    spec = model_at(mock, "openai", "gpt-up")
    mock.state.model("gpt-up").steps.append({"status": 429, "headers": {"Retry-After": "7"}})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, spec, "chat", {"messages": []})
    assert info.value.kind is FailureKind.UPSTREAM_429
    assert info.value.retry_after_s == 7


async def test_ollama_speaks_openai_for_chat_and_embeddings(mock, transport):
    spec = model_at(mock, "ollama", "llama3.2")
    chat = await call(transport, spec, "chat", {"messages": [{"role": "user", "content": "hi"}]})
    emb = await call(transport, spec, "embeddings", {"input": "hello"})
    assert orjson.loads(chat.body)["model"] == "llama3.2"
    assert len(orjson.loads(emb.body)["data"]) == 1


@pytest.mark.parametrize("kind", ["rerank", "responses"])
def test_ollama_refuses_what_it_cannot_do(kind):
    spec = model("llama3.2", provider(dialect="ollama"))
    with pytest.raises(GatewayError) as info:
        get_dialect("ollama").build_request(kind, {}, spec, spec.provider.base_url, None, False)
    assert info.value.status == 400 and info.value.code == "unsupported_capability"
    assert "llama3.2" in info.value.message and kind in info.value.message


@pytest.mark.parametrize(
    ("dialect", "base", "path", "expected"),
    [
        ("openai", "https://api.openai.com/v1", "", "https://api.openai.com/v1/models"),
        ("openai", "http://h:1/v1", "/health", "http://h:1/v1/health"),
        ("ollama", "http://h:11434/v1", "", "http://h:11434/api/tags"),
        ("ollama", "http://h:11434/v1", "/models", "http://h:11434/v1/models"),
        ("anthropic", "https://api.anthropic.com/v1", "", "https://api.anthropic.com/v1/models"),
        ("cohere", "https://api.cohere.com/v2", "", "https://api.cohere.com/v2/models"),
        ("tei", "http://tei:8080", "", "http://tei:8080/health"),
        ("tei", "http://tei:8080", "/info", "http://tei:8080/info"),
    ],
)
def test_health_urls(dialect, base, path, expected):
    assert get_dialect(dialect).health_url(provider(dialect=dialect, base_url=base, health_check_path=path)) == expected


def test_unknown_dialect_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="openai"):
        get_dialect("grpc")
