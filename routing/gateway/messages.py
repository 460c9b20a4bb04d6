"""The Anthropic Messages endpoint: `POST /v1/messages` and `/v1/messages/count_tokens`.

docs/anthropic-messages.md. The request is checked (routing.gateway.messages_fields),
translated into the internal chat shape and then runs the chat path unchanged (model
selection, policy, chain, preflight, executor, usage records) over any chat dialect.
This module supplies what differs at the edges: the `x-api-key` credential, the
per-link request and answer (`MessagesHook`: passthrough to Anthropic upstreams, translation
to and from the others), the Anthropic event stream and errors in Anthropic's shape.
Which it is per link is the protocol table's (routing.upstream.translate.table.TRANSLATORS:
the ("messages", "messages") pass-through where the upstream speaks Messages, by
routing.core.kinds.NATIVE_PROTOCOLS; ("messages", "chat") elsewhere).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl

import orjson

from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.executor import Link
from routing.core.prices import token_classes
from routing.gateway import body_schemas, messages_fields
from routing.gateway.model_name import with_model
from routing.gateway.wire import JSON, Scope, Send, answer_headers, send_response
from routing.plan import preflight
from routing.runtime.accounting import Context
from routing.upstream.dialects import Dialect, ParsedResponse, PreparedRequest, get_dialect
from routing.upstream.dialects.base import load_json
from routing.upstream.translate.messages_passthrough import AnthropicRelay
from routing.upstream.translate.messages_to_chat import Gaps, MessagesStream, chat_request
from routing.upstream.translate.shared import anthropic_usage, error_body, reasoning_gated, without_foreign_thinking
from routing.upstream.translate.table import Translator, translator

PROTOCOL = "messages"  # this endpoint's row of routing.core.kinds.NATIVE_PROTOCOLS
_PROTOCOL_NAME = "Anthropic's Messages API"


def credential(auth: bytes, x_api_key: bytes) -> bytes:
    """The Authorization value to check: the client's Bearer, else its `x-api-key` as one."""
    if auth or not x_api_key:
        return auth
    return b"Bearer " + x_api_key.strip()


def chat_body(endpoint: str, body: dict[str, Any], raw: bytes, gaps: Gaps | None = None) -> dict[str, Any]:
    """The internal chat body for an Anthropic request; 400 naming the field when it is malformed.

    It decides the model, the chain and preflight, whichever links follow (the ("messages", "chat") row's
    request, made once before any link is known); a passthrough link never sends it. What it
    cannot carry goes to `gaps`, for the translated links to refuse or drop (MessagesHook.prepare).
    The depth check comes first: the translation encodes tool inputs itself.
    """
    messages_fields.check(body, count_tokens=endpoint == "count_tokens")
    body_schemas.check_depth_of(body, raw)
    return chat_request(body, gaps if gaps is not None else Gaps())


def error_answer(ctx: Context, exc: GatewayError) -> bytes:
    """`exc` in Anthropic's error shape, same status; an Anthropic upstream's own error type is kept."""
    upstream_type = exc.error_object.get("type") if isinstance(exc.error_object, dict) else None
    return error_body(exc.status, exc.message, upstream_type, ctx.request_id)


async def send_count(send: Send, ctx: Context, body: dict[str, Any]) -> None:
    """`{"input_tokens": N}` from the preflight estimate (characters / 4 plus framing), no upstream call."""
    tokens = preflight.estimate_tokens("chat", body)
    ctx.status = 200
    await send_response(send, 200, orjson.dumps({"input_tokens": tokens}), answer_headers(ctx, [JSON]))


def _pair(link: Link) -> Translator:
    """The link's row of the protocol table: the pass-through when its upstream speaks the Messages API
    itself (NATIVE_PROTOCOLS, narrowed by model: Anthropic, or Claude on Vertex AI), else the translation."""
    model = link.model
    return translator(PROTOCOL, get_dialect(model.provider.dialect).speaks(PROTOCOL, model))


class MessagesHook:
    """The proxy hook (routing.gateway.proxy.ProtocolHook) for one /v1/messages request.

    A link whose upstream speaks the Messages API gets the client's own body (only `model`
    replaced) and its `anthropic-beta` header, and its answer or event stream is relayed as the
    upstream sent it; any other link gets the chat translation (refused when a field has no
    counterpart, its dropped hints named in `x-switchboard-dropped`), and its answer / chunk
    stream is translated back.
    """

    __slots__ = ("original", "raw", "beta", "beta_query", "gaps", "ctx")

    def __init__(self, original: dict[str, Any], raw: bytes, scope: Scope, ctx: Context) -> None:
        self.original = original
        self.raw = raw  # the client's bytes: a passthrough sends them, only the model replaced
        self.gaps = Gaps()  # filled by chat_body
        self.ctx = ctx
        betas = [value.decode("latin-1") for name, value in scope["headers"] if name == b"anthropic-beta"]
        self.beta: str | None = ",".join(betas) or None  # the client's anthropic-beta, for Anthropic upstreams
        # Claude Code calls /v1/messages?beta=true: forwarded to upstreams that take it (that parameter only)
        self.beta_query = ("beta", "true") in parse_qsl(scope.get("query_string", b"").decode("latin-1"))

    def prepare(self, link: Link, stream: bool, body: dict[str, Any]) -> PreparedRequest | None:
        model = link.model
        dialect = get_dialect(model.provider.dialect)
        if not _pair(link).passthrough:
            return self._translated(link, dialect, stream, body)
        self.ctx.dropped = ""
        original = self.original
        signed = without_foreign_thinking(original) if b'"thinking"' in self.raw else None
        if signed is not None:  # another provider's thinking, unsigned: never sent to Anthropic
            original = signed
        payload = {**original, "model": model.upstream_model}
        if stream:
            payload["stream"] = True
        else:
            payload.pop("stream", None)
        # `stream` as sent: the call streams exactly when the client's body says "stream": true
        encoded = None
        if signed is None and isinstance(original.get("model"), str):
            encoded = with_model(self.raw, model.upstream_model)
        return dialect.prepare_native(payload, model, link.base_url, link.api_key, self.beta, encoded, self.beta_query)

    def _translated(self, link: Link, dialect: Dialect, stream: bool, body: dict[str, Any]) -> PreparedRequest | None:
        """A chat link: refused when the request has a field it cannot carry; else the call's chat `body`
        (None: the proxy builds it), but without `reasoning_effort` where the model does not declare
        `reasoning` — Claude Code always sends `thinking`, and a chat model that cannot reason (gpt-4o, many
        vLLM and llama.cpp models) answers 400 to the field; the client's `thinking` is then a dropped hint."""
        model = link.model
        refused = self.gaps.refused
        if refused:
            raise errors.no_counterpart(refused[0][0], model.id, dialect.name, _PROTOCOL_NAME)
        lean, self.ctx.dropped = reasoning_gated(body, model.capabilities, self.gaps.dropped, self.gaps.reasoning)
        if lean is None:
            return None
        return dialect.build_request("chat", lean, model, link.base_url, link.api_key, stream)

    def parse(self, dialect: Dialect, link: Link, data: bytes, prepared: PreparedRequest) -> ParsedResponse:
        pair = _pair(link)
        if pair.answer is None:
            raw = load_json(data, link.model).get("usage")
            prompt, completion, _ = anthropic_usage(raw)
            return ParsedResponse(data, (prompt, completion), token_classes(raw))
        parsed = dialect.parse_response("chat", data, link.model, prepared.context)
        return ParsedResponse(orjson.dumps(pair.answer(orjson.loads(parsed.body))), parsed.usage, parsed.classes)

    def chunks(self, dialect: Dialect, link: Link, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        pair = _pair(link)
        if pair.stream is not None:
            return pair.stream(chunks)
        return dialect.translate_stream(chunks, link.model)

    def tap(self, link: Link, strip: bool) -> AnthropicRelay | MessagesStream:  # noqa: ARG002 - no usage frame to keep back
        pair = _pair(link)
        if pair.passthrough:
            return pair.tap()
        # message_start's input_tokens: the prompt estimate preflight made (the upstream's count comes last)
        req = self.ctx.requirements
        return pair.tap(input_tokens=req.estimated_tokens if req is not None else 0)
