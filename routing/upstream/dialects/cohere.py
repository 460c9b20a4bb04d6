"""Cohere v2 API: /rerank and /embed (base_url like https://api.cohere.com/v2)."""

from __future__ import annotations

from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects.base import (
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


def _billed(data: dict[str, Any]) -> tuple[int | None, int | None]:
    meta = data.get("meta")
    units = meta.get("billed_units") if isinstance(meta, dict) else None
    if not isinstance(units, dict):
        return (None, None)
    inp, out = units.get("input_tokens"), units.get("output_tokens")
    return (
        int(inp) if isinstance(inp, int | float) else None,
        int(out) if isinstance(out, int | float) else None,
    )


class CohereDialect(Dialect):
    name = "cohere"

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
        if kind == "rerank":
            query, texts, top_n = rerank_inputs(body)
            payload: dict[str, Any] = {"model": model.upstream_model, "query": query, "documents": texts}
            if top_n is not None:
                payload["top_n"] = top_n
            return PreparedRequest("POST", join_url(base_url, "/rerank"), headers, encode(payload))
        if kind == "embeddings":
            payload = {
                "model": model.upstream_model,
                "texts": embedding_inputs(body),
                "input_type": body.get("input_type") or "search_document",
                "embedding_types": ["float"],
            }
            if body.get("dimensions") is not None:
                payload["output_dimension"] = body["dimensions"]
            context = {"encoding_format": body.get("encoding_format")}
            return PreparedRequest("POST", join_url(base_url, "/embed"), headers, encode(payload), context)
        raise unsupported(self.name, kind, model)

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model)
        usage = _billed(data)
        if kind == "rerank":
            results = [
                {"index": r["index"], "relevance_score": r["relevance_score"]}
                for r in data.get("results") or ()
                if isinstance(r, dict) and "index" in r and "relevance_score" in r
            ]
            out: dict[str, Any] = {"id": data.get("id", ""), "results": results, "model": model.upstream_model}
            return ParsedResponse(orjson.dumps(out), usage)
        embeddings = data.get("embeddings")
        vectors = embeddings.get("float") if isinstance(embeddings, dict) else None
        if not isinstance(vectors, list):
            raise UpstreamFailure(
                FailureKind.INVALID_BODY,
                f"provider {model.provider.name!r} (cohere) answered without embeddings.float",
                body=body[:2048],
            )
        encoding = (context or {}).get("encoding_format")
        return ParsedResponse(orjson.dumps(embeddings_list(vectors, model.upstream_model, usage[0], encoding)), usage)
