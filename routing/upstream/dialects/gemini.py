"""Google Gemini API: `generateContent`, `streamGenerateContent?alt=sse`, `embedContent` (docs/providers.md#gemini).

base_url like https://generativelanguage.googleapis.com/v1beta; the key goes in
`x-goog-api-key`. The chat translation is routing.upstream.translate.chat_to_gemini (shared with
the vertex dialect). Errors need nothing here: 429 RESOURCE_EXHAUSTED is a rate limit,
400 INVALID_ARGUMENT a client error (routing.core.errors), and safety blocks are
content-filter refusals (chat_to_gemini.blocked).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.prices import token_classes
from routing.upstream.dialects.base import (
    Dialect,
    ParsedResponse,
    PreparedRequest,
    encode,
    join_url,
    load_json,
    unsupported,
)
from routing.upstream.dialects.openai_bodies import embedding_inputs, embeddings_list
from routing.upstream.translate import chat_to_gemini


def model_path(upstream_model: str) -> str:
    """`models/{m}` of an upstream model name given with or without its `models/` prefix."""
    return "models/" + quote(upstream_model.removeprefix("models/"), safe="-._")


def chat_url(base_url: str, resource: str, stream: bool) -> str:
    """The generateContent (or SSE streamGenerateContent) URL of a model resource path."""
    method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
    return join_url(base_url, resource) + method


class GeminiDialect(Dialect):
    name = "gemini"

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        headers = {"Content-Type": "application/json", **self.auth_headers(api_key)}
        resource = model_path(model.upstream_model)
        if kind == "chat":
            dropped = chat_to_gemini.gaps(body, model)
            payload = chat_to_gemini.gemini_request(body, model)
            return PreparedRequest(
                "POST", chat_url(base_url, resource, stream), headers, encode(payload), None, dropped
            )
        if kind == "embeddings":
            texts = embedding_inputs(body)
            one: dict[str, Any] = {"model": resource}
            if body.get("dimensions") is not None:
                one["outputDimensionality"] = body["dimensions"]
            requests = [{**one, "content": {"parts": [{"text": str(t)}]}} for t in texts]
            url = join_url(base_url, resource) + ":batchEmbedContents"
            context = {"encoding_format": body.get("encoding_format"), "count": len(texts)}
            return PreparedRequest("POST", url, headers, encode({"requests": requests}), context)
        raise unsupported(self.name, kind, model)

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model)
        if kind == "embeddings":
            return _embeddings(data, model, body, context or {})
        out, prompt, completion = chat_to_gemini.chat_completion_of(data, model, body)
        return ParsedResponse(orjson.dumps(out), (prompt, completion), token_classes(out.get("usage")))

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        return chat_to_gemini.translate_sse(chunks, model)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}


def _embeddings(data: dict[str, Any], model: ModelSpec, body: bytes, context: dict[str, Any]) -> ParsedResponse:
    """batchEmbedContents' `embeddings[].values` as the OpenAI list; Gemini reports no token usage."""
    items = data.get("embeddings")
    vectors = [e.get("values") for e in items if isinstance(e, dict)] if isinstance(items, list) else None
    if not vectors or any(not isinstance(v, list) for v in vectors):
        raise UpstreamFailure(
            FailureKind.INVALID_BODY,
            f"provider {model.provider.name!r} (gemini) answered without embeddings[].values",
            body=body[:2048],
        )
    out = embeddings_list(vectors, model.upstream_model, None, context.get("encoding_format"))
    return ParsedResponse(orjson.dumps(out), (None, None))
