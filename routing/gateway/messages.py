"""The Anthropic Messages endpoint: `POST /v1/messages` and `/v1/messages/count_tokens`.

docs/anthropic-messages.md. The request is checked (routing.gateway.messages_shapes),
translated into the internal chat shape and then runs the chat path unchanged (model
selection, policy, chain, preflight, executor, usage records) over any chat dialect.
This module supplies what differs at the edges: the `x-api-key` credential, the
answer translated back (`SHAPE.body`), the Anthropic event stream (`SHAPE.tap`, fed
the committed chunk stream) and errors in Anthropic's shape. The translations
themselves are in providers.dialects.anthropic_shapes.
"""

from __future__ import annotations

from typing import Any

import orjson

from providers.dialects.anthropic_shapes import MessagesStream, chat_request, error_body, message_of
from routing.core.errors import GatewayError
from routing.gateway import messages_shapes
from routing.gateway.wire import JSON, Send, answer_headers, send_response
from routing.ops.accounting import Context
from routing.plan import preflight

ENDPOINTS = frozenset({"messages", "count_tokens"})


def credential(auth: bytes, x_api_key: bytes) -> bytes:
    """The Authorization value to check: the client's Bearer, else its `x-api-key` as one."""
    if auth or not x_api_key:
        return auth
    return b"Bearer " + x_api_key.strip()


def chat_body(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """The internal chat body for an Anthropic request; 400 naming the field when it is malformed."""
    messages_shapes.check(body, count_tokens=endpoint == "count_tokens")
    return chat_request(body)


def error_answer(ctx: Context, exc: GatewayError) -> bytes:
    """`exc` in Anthropic's error shape, same status; an Anthropic upstream's own error type is kept."""
    upstream_type = exc.error_object.get("type") if isinstance(exc.error_object, dict) else None
    return error_body(exc.status, exc.message, upstream_type, ctx.request_id)


async def send_count(send: Send, ctx: Context, body: dict[str, Any]) -> None:
    """`{"input_tokens": N}` from the preflight estimate (characters / 4 plus framing), no upstream call."""
    tokens = preflight.estimate_tokens("chat", body)
    ctx.status = 200
    ctx.prompt_tokens = tokens
    await send_response(send, 200, orjson.dumps({"input_tokens": tokens}), answer_headers(ctx, [JSON]))


class _Shape:
    """The proxy hook (routing.gateway.proxy): chat answers and chunk streams as Anthropic's."""

    __slots__ = ()

    @staticmethod
    def body(payload: bytes) -> bytes:
        return orjson.dumps(message_of(orjson.loads(payload)))

    @staticmethod
    def tap(strip: bool) -> MessagesStream:  # noqa: ARG004 - the usage frame is never relayed as such
        return MessagesStream()


SHAPE = _Shape()
