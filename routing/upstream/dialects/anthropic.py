"""Anthropic Messages API behind the OpenAI Chat Completions shape (chat only).

Requests: system messages become `system`, image_url parts become image blocks,
assistant tool_calls become tool_use blocks, tool messages become user tool_result
blocks, OpenAI function tools become Anthropic tools. Answers and SSE streams are
translated back to chat.completion / chat.completion.chunk, so clients never see
the difference. The translation is routing.upstream.translate.chat_to_anthropic (the
(chat, messages) row of routing.upstream.translate.table.TRANSLATORS). Non-2xx bodies are left to routing.core.errors (529
overloaded is a 5xx).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
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
from routing.upstream.translate.chat_to_anthropic import (
    anthropic_request,
    chat_completion_of,
    gaps,
    translate_messages,
    translate_sse,
    translate_tool_choice,
    translate_tools,
)
from routing.upstream.translate.shared import API_VERSION, DEFAULT_MAX_TOKENS, FINISH_REASONS


class AnthropicDialect(Dialect):
    name = "anthropic"

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        if kind != "chat":
            raise unsupported(self.name, kind, model)
        dropped = gaps(body, model)
        payload = anthropic_request(body, model.upstream_model, stream, model.max_output_tokens)
        prepared = self.prepare(payload, base_url, api_key)
        return replace(prepared, dropped=dropped) if dropped else prepared

    def prepare(
        self,
        payload: dict[str, Any],
        base_url: str,
        api_key: str | None,
        beta: str | None = None,
        encoded: bytes | None = None,
        beta_query: bool = False,
    ) -> PreparedRequest:
        """The upstream request for an Anthropic Messages body (also /v1/messages' passthrough, which
        forwards the client's `anthropic-beta` and `?beta=true` and sends the client's own bytes as `encoded`)."""
        headers = {"Content-Type": "application/json", **self.auth_headers(api_key)}
        if beta:
            headers["anthropic-beta"] = beta
        body = encode(payload) if encoded is None else encoded
        url = join_url(base_url, "/messages")
        if beta_query:
            url += ("&" if "?" in url else "?") + "beta=true"
        return PreparedRequest("POST", url, headers, body)

    def prepare_native(
        self,
        payload: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        beta: str | None,
        encoded: bytes | None = None,
        beta_query: bool = False,
    ) -> PreparedRequest:
        return self.prepare(payload, base_url, api_key, beta, encoded, beta_query)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Anthropic authenticates with `x-api-key` and needs `anthropic-version` on every call."""
        if api_key:
            return {"anthropic-version": API_VERSION, "x-api-key": api_key}
        return {"anthropic-version": API_VERSION}

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model)
        out, prompt, completion = chat_completion_of(data, model.upstream_model)
        return ParsedResponse(orjson.dumps(out), (prompt, completion), token_classes(data.get("usage")))

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        return translate_sse(chunks, model)


__all__ = [
    "API_VERSION",
    "DEFAULT_MAX_TOKENS",
    "FINISH_REASONS",
    "AnthropicDialect",
    "translate_messages",
    "translate_sse",
    "translate_tool_choice",
    "translate_tools",
]
