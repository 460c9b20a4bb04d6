"""OpenAI-shaped bodies shared by the dialects that must build them (tei, cohere, gemini's embeddings)."""

from __future__ import annotations

import base64
from array import array
from typing import Any

from routing.core.errors import invalid_request


def embedding_inputs(body: dict[str, Any]) -> list[Any]:
    """The embeddings `input` as a list (OpenAI allows a single string)."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        return raw
    raise invalid_request("input must be a string or a non-empty list of strings", "input")


def rerank_inputs(body: dict[str, Any]) -> tuple[str, list[str], int | None]:
    """(query, document texts, top_n) of a rerank request; documents may be {"text": ...}."""
    query = body.get("query")
    if not isinstance(query, str):
        raise invalid_request("query must be a string", "query")
    raw = body.get("documents")
    if not isinstance(raw, list):
        raise invalid_request("documents must be a list of strings", "documents")
    texts = []
    for i, doc in enumerate(raw):
        if isinstance(doc, dict) and isinstance(doc.get("text"), str):
            doc = doc["text"]
        if not isinstance(doc, str):
            raise invalid_request(f"documents[{i}] must be a string", f"documents[{i}]")
        texts.append(doc)
    top_n = body.get("top_n")
    if top_n is not None and (type(top_n) is not int or top_n < 0):
        raise invalid_request("top_n must be a non-negative integer", "top_n")
    return query, texts, top_n


def _encode(vector: list[float], encoding: str | None) -> Any:
    if encoding == "base64":
        return base64.b64encode(array("f", vector).tobytes()).decode()
    return vector


def embeddings_list(vectors: list[Any], model: str, prompt_tokens: int | None, encoding: str | None) -> dict[str, Any]:
    """The OpenAI embeddings list shape (base64 float32 when the client asked for it)."""
    tokens = prompt_tokens or 0
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": _encode(v, encoding)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
