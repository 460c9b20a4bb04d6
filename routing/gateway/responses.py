"""`/v1/responses` over any chat-capable link (docs/api.md#responses).

A link whose upstream speaks the Responses API itself (`openai`, `azure_openai`: the
dialect table's NATIVE_PROTOCOLS row) gets the client's body as sent (the dialect replaces
only `model`), and its answer or event stream comes back as it came, its events framed for
the commit rule of chat streams: the ("responses", "responses") row of the protocol table
(routing.upstream.translate.table.TRANSLATORS). Any other link gets the request translated to
the internal chat shape, which its dialect sends as it sends chat, and its answer or chunk
stream is translated back: the ("responses", "chat") row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.core.executor import Link
from routing.runtime.accounting import Context
from routing.upstream.dialects import Dialect, ParsedResponse, PreparedRequest, get_dialect
from routing.upstream.translate.responses_passthrough import ResponsesRelay
from routing.upstream.translate.responses_to_chat import ResponsesEvents
from routing.upstream.translate.shared import reasoning_gated
from routing.upstream.translate.table import Translator, translator

PROTOCOL = "responses"  # this endpoint's row of routing.core.kinds.NATIVE_PROTOCOLS


def _native(link: Link) -> bool:
    """The link's upstream speaks Responses: its dialect does, and the model declares `responses` (a
    chat-only model on an OpenAI-compatible server — llama.cpp, vLLM — is served by translation)."""
    model = link.model
    return PROTOCOL in model.capabilities and get_dialect(model.provider.dialect).speaks(PROTOCOL, model)


def _pair(link: Link) -> Translator:
    """The link's row of the protocol table: the pass-through on a native link, else the translation."""
    return translator(PROTOCOL, _native(link))


class ResponsesHook:
    """The proxy hook (routing.gateway.proxy.ProtocolHook) of one Responses request."""

    __slots__ = ("original", "ctx", "_chat", "_dropped")

    def __init__(self, original: dict[str, Any], ctx: Context) -> None:
        self.original = original
        self.ctx = ctx
        self._chat: dict[str, Any] | None = None  # the chat translation, made for the first translated link
        self._dropped: tuple[str, ...] = ()  # what that translation left out, for x-switchboard-dropped

    def prepare(self, link: Link, stream: bool, body: dict[str, Any]) -> PreparedRequest | None:  # noqa: ARG002
        """A native link: None (the dialect sends the call's `body`, the client's own); a translated one: the
        chat translation, made once for the first such link, without `reasoning_effort` on a link whose model
        does not declare `reasoning` (a chat model that cannot reason answers 400 to it), the client's
        `reasoning` then named as a dropped hint."""
        pair = _pair(link)
        if pair.request is None:
            self.ctx.dropped = ""
            return None  # the dialect's own request: the client's body, `model` replaced
        if self._chat is None:
            dropped: list[str] = []
            self._chat = pair.request(self.original, dropped)
            self._dropped = tuple(dropped)
        model = link.model
        dialect = get_dialect(model.provider.dialect)
        chat = self._chat
        lean, self.ctx.dropped = reasoning_gated(chat, model.capabilities, self._dropped, ("reasoning",))
        if lean is not None:
            chat = lean
        if stream and dialect.stream_usage_option:  # the usage frame, for response.completed's usage
            chat = {**chat, "stream": True, "stream_options": {"include_usage": True}}
        return dialect.build_request("chat", chat, model, link.base_url, link.api_key, stream)

    def parse(self, dialect: Dialect, link: Link, data: bytes, prepared: PreparedRequest) -> ParsedResponse:
        pair = _pair(link)
        if pair.answer is None:
            return dialect.parse_response(PROTOCOL, data, link.model, prepared.context)
        parsed = dialect.parse_response("chat", data, link.model, prepared.context)
        return ParsedResponse(orjson.dumps(pair.answer(orjson.loads(parsed.body))), parsed.usage, parsed.classes)

    def chunks(self, dialect: Dialect, link: Link, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        pair = _pair(link)
        if pair.stream is not None:
            return pair.stream(chunks)
        return dialect.translate_stream(chunks, link.model)

    def tap(self, link: Link, strip: bool) -> ResponsesRelay | ResponsesEvents:  # noqa: ARG002 - nothing kept back
        return _pair(link).tap()
