"""TEI and Cohere v2 dialects against the mock: request shapes, reshaped answers, usage."""

from __future__ import annotations

import base64
from array import array

import orjson
import pytest

from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects import get_dialect
from tests.upstream.conftest import call, model, model_at, provider

DOCS = ["the dog sleeps", "a cat eats cat food", "cat"]


async def test_tei_embeddings_become_the_openai_list(mock, transport):
    spec = model_at(mock, "tei", "bge-small")
    parsed = await call(transport, spec, "embeddings", {"model": "public", "input": ["a", "b"]}, api_key="hf-key")
    got = mock.state.calls("tei")["requests"][0]
    assert got["path"] == "/tei/embed"
    assert got["body"] == {"inputs": ["a", "b"]}
    assert got["headers"]["Authorization"] == "Bearer hf-key"
    out = orjson.loads(parsed.body)
    assert out["object"] == "list" and out["model"] == "bge-small"
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert out["data"][0]["object"] == "embedding" and len(out["data"][0]["embedding"]) == 8
    assert parsed.usage == (None, None)


async def test_tei_single_string_input_and_base64_encoding(mock, transport):
    spec = model_at(mock, "tei", "bge-small")
    parsed = await call(transport, spec, "embeddings", {"input": "one", "encoding_format": "base64"})
    assert mock.state.calls("tei")["requests"][0]["body"] == {"inputs": ["one"]}
    encoded = orjson.loads(parsed.body)["data"][0]["embedding"]
    assert list(array("f", base64.b64decode(encoded))) == [0.125, -0.25, 0.5, 0.0625, 1.0, -0.5, 0.25, 0.75]


async def test_tei_rerank_is_sorted_by_score_and_honours_top_n(mock, transport):
    spec = model_at(mock, "tei", "bge-reranker")
    parsed = await call(transport, spec, "rerank", {"query": "cat", "documents": DOCS, "top_n": 2})
    got = mock.state.calls("tei")["requests"][0]
    assert got["path"] == "/tei/rerank"
    assert got["body"] == {"query": "cat", "texts": DOCS, "raw_scores": False}
    out = orjson.loads(parsed.body)
    assert out["model"] == "bge-reranker"
    assert [r["index"] for r in out["results"]] == [2, 1]
    scores = [r["relevance_score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)


async def test_tei_rerank_sorts_an_unsorted_answer(mock, transport):
    mock.state.model("tei").steps.append({"body": '[{"index": 0, "score": 0.1}, {"index": 1, "score": 0.9}]'})
    parsed = await call(
        transport, model_at(mock, "tei", "r"), "rerank", {"query": "q", "documents": [{"text": "a"}, "b"]}
    )
    assert orjson.loads(parsed.body)["results"] == [
        {"index": 1, "relevance_score": 0.9},
        {"index": 0, "relevance_score": 0.1},
    ]


async def test_tei_non_list_answer_is_invalid_body(mock, transport):
    mock.state.model("tei").steps.append({"body": '{"oops": 1}'})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "tei", "bge-small"), "embeddings", {"input": "x"})
    assert info.value.kind is FailureKind.INVALID_BODY


async def test_tei_errors_are_classified_by_status(mock, transport):
    mock.state.model("tei").steps.append({"status": 503, "body": '{"error": "model is loading"}'})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "tei", "bge-small"), "embeddings", {"input": "x"})
    assert info.value.kind is FailureKind.UPSTREAM_5XX


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_tei_cannot_chat(kind):
    spec = model("bge", provider(dialect="tei"))
    with pytest.raises(GatewayError) as info:
        get_dialect("tei").build_request(kind, {"messages": []}, spec, "http://x", None, False)
    assert info.value.status == 400 and info.value.code == "unsupported_capability"


def test_rerank_documents_must_be_strings():
    spec = model("bge", provider(dialect="tei"))
    with pytest.raises(GatewayError) as info:
        get_dialect("tei").build_request("rerank", {"query": "q", "documents": ["a", 3]}, spec, "http://x", None, False)
    assert info.value.code == "invalid_request" and info.value.param == "documents[1]"


async def test_cohere_rerank_request_and_answer(mock, transport):
    spec = model_at(mock, "cohere", "rerank-v3.5")
    parsed = await call(
        transport, spec, "rerank", {"model": "public", "query": "cat", "documents": DOCS, "top_n": 2}, api_key="co-key"
    )
    got = mock.state.calls("rerank-v3.5")["requests"][0]
    assert got["path"] == "/cohere/v2/rerank"
    assert got["body"] == {"model": "rerank-v3.5", "query": "cat", "documents": DOCS, "top_n": 2}
    assert got["headers"]["Authorization"] == "Bearer co-key"
    out = orjson.loads(parsed.body)
    assert out["model"] == "rerank-v3.5" and out["id"] == "cohere-rerank-mock"
    assert [r["index"] for r in out["results"]] == [2, 1]
    assert set(out["results"][0]) == {"index", "relevance_score"}


async def test_cohere_embed_request_answer_and_billed_usage(mock, transport):
    spec = model_at(mock, "cohere", "embed-v4.0")
    parsed = await call(transport, spec, "embeddings", {"input": ["hello world", "x"]})
    got = mock.state.calls("embed-v4.0")["requests"][0]
    assert got["path"] == "/cohere/v2/embed"
    assert got["body"] == {
        "model": "embed-v4.0",
        "texts": ["hello world", "x"],
        "input_type": "search_document",
        "embedding_types": ["float"],
    }
    out = orjson.loads(parsed.body)
    assert len(out["data"]) == 2 and out["data"][1]["index"] == 1
    assert parsed.usage == (3, None)
    assert out["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


async def test_cohere_input_type_from_the_client_is_kept(mock, transport):
    await call(
        transport, model_at(mock, "cohere", "embed-v4.0"), "embeddings", {"input": "q", "input_type": "search_query"}
    )
    assert mock.state.calls("embed-v4.0")["requests"][0]["body"]["input_type"] == "search_query"


async def test_cohere_429_keeps_retry_after(mock, transport):
    mock.state.model("embed-v4.0").steps.append({"status": 429, "headers": {"Retry-After": "2"}})
    with pytest.raises(UpstreamFailure) as info:
        await call(transport, model_at(mock, "cohere", "embed-v4.0"), "embeddings", {"input": "q"})
    assert info.value.kind is FailureKind.UPSTREAM_429 and info.value.retry_after_s == 2


def test_cohere_cannot_chat():
    spec = model("command", provider(dialect="cohere"))
    with pytest.raises(GatewayError) as info:
        get_dialect("cohere").build_request("chat", {"messages": []}, spec, "http://x", None, False)
    assert info.value.code == "unsupported_capability"
