"""Streaming `/v1/responses` on links whose upstream speaks the Responses API (docs/api.md#responses).

The request goes up as the client sent it (the dialect replaces only `model`), so this hook
builds nothing: it frames the upstream's event stream for the commit rule of chat streams and
taps the committed bytes for their usage (routing.upstream.dialects.responses_stream). Links
that do not speak the Responses API are left out of the chain by preflight, as for a
non-streaming call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from routing.core.executor import Link
from routing.upstream.dialects import Dialect, ParsedResponse, PreparedRequest
from routing.upstream.dialects.responses_stream import ResponsesRelay, held_until_content


class StreamShape:
    """The proxy hook (routing.gateway.proxy.Shape) of a streamed Responses request."""

    __slots__ = ()

    def prepare(self, link: Link, stream: bool) -> PreparedRequest | None:
        return None  # the dialect's own request: the client's body, `model` replaced

    def parse(self, dialect: Dialect, link: Link, data: bytes, prepared: PreparedRequest) -> ParsedResponse:
        return dialect.parse_response("responses", data, link.model, prepared.context)

    def chunks(self, dialect: Dialect, link: Link, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return held_until_content(chunks)

    def tap(self, link: Link, strip: bool) -> ResponsesRelay:  # noqa: ARG002 - nothing is kept back
        return ResponsesRelay()
