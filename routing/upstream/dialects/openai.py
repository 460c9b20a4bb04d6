"""OpenAI and OpenAI-compatible servers (vLLM, Jina, LM Studio, ...): near-passthrough.

Only the `model` field is rewritten to the upstream name; every other field goes as
the client sent it, and the upstream's bytes come back unchanged (validated as JSON),
so new OpenAI fields work without a gateway release.
"""

from __future__ import annotations

from typing import Any

from routing.config.snapshot import ModelSpec
from routing.core.endpoints import UPSTREAM_PATHS as PATHS
from routing.core.forms import encode_form, is_form  # each kind's path: its endpoint row's
from routing.upstream.dialects.base import (
    Dialect,
    ParsedResponse,
    PreparedRequest,
    bearer_headers,
    encode,
    parsed_openai,
    unsupported,
)


class OpenAIDialect(Dialect):
    name = "openai"
    stream_usage_option = True

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        path = PATHS.get(kind)
        if path is None or kind not in self.kinds:
            raise unsupported(self.name, kind, model)
        url = base_url.rstrip("/") + path
        if is_form(body):  # a multipart row's form with files: sent on as a form (routing.core.forms)
            payload, content_type = encode_form({**body, "model": model.upstream_model})
            return PreparedRequest("POST", url, {**bearer_headers(api_key), "Content-Type": content_type}, payload)
        return PreparedRequest("POST", url, bearer_headers(api_key), encode({**body, "model": model.upstream_model}))

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        return parsed_openai(body, model)
