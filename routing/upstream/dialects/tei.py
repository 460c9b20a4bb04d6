"""Hugging Face text-embeddings-inference: /embed and /rerank, no chat.

TEI answers bare arrays; they are reshaped to the OpenAI embeddings list and to
our rerank shape (sorted by score, `top_n` applied here since TEI has no such field).
"""

from __future__ import annotations

from typing import Any

import orjson

from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.upstream.dialects.base import (
    NO_USAGE,
    Dialect,
    ParsedResponse,
    PreparedRequest,
    bearer_headers,
    encode,
    join_url,
    load_json,
    unsupported,
)
from routing.upstream.dialects.openai_bodies import embedding_inputs, embeddings_list, rerank_inputs


class TEIDialect(Dialect):
    name = "tei"

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        headers = bearer_headers(api_key)
        if kind == "embeddings":
            payload: dict[str, Any] = {"inputs": embedding_inputs(body)}
            if body.get("dimensions") is not None:
                payload["dimensions"] = body["dimensions"]
            context = {"encoding_format": body.get("encoding_format")}
            return PreparedRequest("POST", join_url(base_url, "/embed"), headers, encode(payload), context)
        if kind == "rerank":
            query, texts, top_n = rerank_inputs(body)
            payload = {"query": query, "texts": texts, "raw_scores": False}
            return PreparedRequest("POST", join_url(base_url, "/rerank"), headers, encode(payload), {"top_n": top_n})
        raise unsupported(self.name, kind, model)

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model, list)
        context = context or {}
        if kind == "embeddings":
            out = embeddings_list(data, model.upstream_model, None, context.get("encoding_format"))
            return ParsedResponse(orjson.dumps(out), NO_USAGE)
        results = [
            {"index": r["index"], "relevance_score": r["score"]}
            for r in data
            if isinstance(r, dict) and "index" in r and "score" in r
        ]
        results.sort(key=lambda r: r["relevance_score"], reverse=True)
        top_n = context.get("top_n")
        if top_n is not None:
            results = results[:top_n]
        return ParsedResponse(orjson.dumps({"results": results, "model": model.upstream_model}), NO_USAGE)

    def health_url(self, provider: ProviderSpec) -> str:
        """TEI serves GET /health at its root, which is the base URL its /embed hangs off."""
        return join_url(provider.base_url, provider.health_check_path or "/health")
