"""The Anthropic Messages endpoint: `POST /v1/messages` and `/v1/messages/count_tokens`.

docs/anthropic-messages.md. The request is checked (routing.gateway.messages_fields),
translated into the internal chat shape and then runs the chat path unchanged (model
selection, policy, chain, preflight, executor, usage records) over any chat dialect.
This module supplies what differs at the edges: the `x-api-key` credential, the
per-link request and answer (`Shape`: passthrough to Anthropic upstreams, translation
to and from the others), the Anthropic event stream and errors in Anthropic's shape.
The translations themselves are in routing.upstream.dialects.anthropic_translation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.core.errors import GatewayError
from routing.core.executor import Link
from routing.core.prices import token_classes
from routing.gateway import body_schemas, messages_fields
from routing.gateway.wire import JSON, Scope, Send, answer_headers, send_response
from routing.plan import preflight
from routing.runtime.accounting import Context
from routing.upstream.dialects import Dialect, ParsedResponse, PreparedRequest, get_dialect
from routing.upstream.dialects.anthropic_translation import (
    AnthropicRelay,
    MessagesStream,
    anthropic_usage,
    chat_request,
    error_body,
    held_until_content,
    message_of,
)
from routing.upstream.dialects.base import load_json
from routing.upstream.dialects.vertex import VertexDialect, is_anthropic

ENDPOINTS = frozenset({"messages", "count_tokens"})
_ANTHROPIC = get_dialect("anthropic")
_VERTEX = VertexDialect()  # stateless: for its prepare_anthropic (Claude on Vertex AI)


def credential(auth: bytes, x_api_key: bytes) -> bytes:
    """The Authorization value to check: the client's Bearer, else its `x-api-key` as one."""
    if auth or not x_api_key:
        return auth
    return b"Bearer " + x_api_key.strip()


def chat_body(endpoint: str, body: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """The internal chat body for an Anthropic request; 400 naming the field when it is malformed.

    The depth check comes first: the translation encodes tool inputs itself.
    """
    messages_fields.check(body, count_tokens=endpoint == "count_tokens")
    body_schemas.check_depth_of(body, raw)
    return chat_request(body)


def error_answer(ctx: Context, exc: GatewayError) -> bytes:
    """`exc` in Anthropic's error shape, same status; an Anthropic upstream's own error type is kept."""
    upstream_type = exc.error_object.get("type") if isinstance(exc.error_object, dict) else None
    return error_body(exc.status, exc.message, upstream_type, ctx.request_id)


async def send_count(send: Send, ctx: Context, body: dict[str, Any]) -> None:
    """`{"input_tokens": N}` from the preflight estimate (characters / 4 plus framing), no upstream call."""
    tokens = preflight.estimate_tokens("chat", body)
    ctx.status = 200
    await send_response(send, 200, orjson.dumps({"input_tokens": tokens}), answer_headers(ctx, [JSON]))


def _passthrough(link: Link) -> bool:
    """Whether the link speaks the Messages API itself: Anthropic, or Claude on Vertex AI."""
    dialect = link.model.provider.dialect
    return dialect == "anthropic" or (dialect == "vertex" and is_anthropic(link.model.upstream_model))


class Shape:
    """The proxy hook (routing.gateway.proxy.Shape) for one /v1/messages request.

    An anthropic-dialect link gets the client's own body (only `model` replaced) and its
    `anthropic-beta` header, and its answer or event stream is relayed as the upstream sent it; any other link gets the
    chat translation, and its answer / chunk stream is translated back.
    """

    __slots__ = ("original", "beta")

    def __init__(self, original: dict[str, Any], scope: Scope) -> None:
        self.original = original
        self.beta: str | None = None  # the client's anthropic-beta, for Anthropic upstreams only
        for name, value in scope["headers"]:
            if name == b"anthropic-beta":
                self.beta = value.decode("latin-1")

    def prepare(self, link: Link, stream: bool) -> PreparedRequest | None:
        if not _passthrough(link):
            return None
        payload = {**self.original, "model": link.model.upstream_model}
        if stream:
            payload["stream"] = True
        else:
            payload.pop("stream", None)
        if link.model.provider.dialect == "vertex":  # the access token is added by the dialect's authorize
            return _VERTEX.prepare_anthropic(payload, link.model.upstream_model, link.base_url, stream)
        return _ANTHROPIC.prepare(payload, link.base_url, link.api_key, self.beta)

    def parse(self, dialect: Dialect, link: Link, data: bytes, prepared: PreparedRequest) -> ParsedResponse:
        if _passthrough(link):
            raw = load_json(data, link.model).get("usage")
            prompt, completion, _ = anthropic_usage(raw)
            return ParsedResponse(data, (prompt, completion), token_classes(raw))
        parsed = dialect.parse_response("chat", data, link.model, prepared.context)
        return ParsedResponse(orjson.dumps(message_of(orjson.loads(parsed.body))), parsed.usage, parsed.classes)

    def chunks(self, dialect: Dialect, link: Link, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if _passthrough(link):
            return held_until_content(chunks)
        return dialect.translate_stream(chunks, link.model)

    def tap(self, link: Link, strip: bool) -> AnthropicRelay | MessagesStream:  # noqa: ARG002 - no usage frame to keep back
        return AnthropicRelay() if _passthrough(link) else MessagesStream()
