"""What every dialect adapter provides: normalised (OpenAI-shaped) call <-> upstream HTTP.

A dialect is stateless and shared by every request. `build_request` turns the
client's OpenAI-shaped body into the upstream's request; `parse_response` turns a
2xx upstream body back into the OpenAI shape the client expects (and reads the token
usage); `translate_stream` turns the upstream's SSE bytes into OpenAI SSE bytes.
Non-2xx answers are classified by `failure`: routing.core.failures.failure_from_response
unless the dialect knows its upstream's error shape better.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.failures import FailureKind, UpstreamFailure, failure_from_response
from routing.core.kinds import DIALECT_KINDS, ENDPOINT_KINDS, NATIVE_PROTOCOLS
from routing.core.prices import token_classes
from routing.upstream.translate.shared import usage_of

KINDS = ENDPOINT_KINDS


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """JSON content type, plus `Authorization: Bearer` when the provider has a key."""
    if api_key:
        return {"Content-Type": "application/json", "Authorization": "Bearer " + api_key}
    return {"Content-Type": "application/json"}


Usage = tuple[int | None, int | None]
NO_USAGE: Usage = (None, None)


class TokenSource(Protocol):
    """Access tokens obtained with I/O and cached per secret (routing.upstream.dialects.vertex.ServiceAccountTokens)."""

    async def token(self, secret: str | None, provider: str) -> str: ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One upstream HTTP request. `context` carries what parse_response needs from the
    client's request (e.g. rerank top_n for an upstream that cannot apply it); `dropped` names the
    client's hints the translation went without (the proxy writes them into x-switchboard-dropped)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    context: Any = None
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """The client-facing OpenAI-shaped JSON body, (prompt_tokens, completion_tokens), and the priced token
    classes inside them when the provider reported any (routing.core.prices.token_classes)."""

    body: bytes
    usage: Usage
    classes: dict[str, int] | None = None


def unsupported(dialect: str, kind: str, model: ModelSpec) -> GatewayError:
    """400 unsupported_capability: this dialect cannot serve `kind` at all."""
    return errors.dialect_cannot_serve(dialect, kind, model.id)


def encode(payload: Any) -> bytes:
    """The upstream request body as JSON; a value the encoder refuses (nested deeper than
    it allows, e.g. tool arguments decoded from a string) is the caller's 400, not a 500."""
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError as exc:
        raise errors.invalid_request(
            f"The request cannot be encoded for the upstream ({exc}); flatten it and resend."
        ) from None


def load_json(body: bytes, model: ModelSpec, expect: type = dict) -> Any:
    """Decode a 2xx upstream body; anything but valid JSON of the `expect` type is INVALID_BODY."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UpstreamFailure(
            FailureKind.INVALID_BODY,
            f"provider {model.provider.name!r} answered 2xx with a body that is not valid JSON ({exc})",
            body=body[:2048],
        ) from None
    if not isinstance(data, expect):
        shape = "an object" if expect is dict else "a list"
        raise UpstreamFailure(
            FailureKind.INVALID_BODY,
            f"provider {model.provider.name!r} answered 2xx with JSON that is not {shape}",
            body=body[:2048],
        )
    return data


def parsed_openai(body: bytes, model: ModelSpec) -> ParsedResponse:
    """An OpenAI-shaped answer relayed as is: its usage and token classes (cached, reasoning, audio)."""
    data = load_json(body, model)
    return ParsedResponse(body, usage_of(data), token_classes(data.get("usage")))


def join_url(base_url: str, path: str) -> str:
    if path and not path.startswith("/"):
        path = "/" + path
    return base_url.rstrip("/") + path


class Dialect:
    """Base adapter: subclasses set `name` and override what differs.

    `kinds`, the endpoint kinds the adapter serves, is the dialect table's row for `name`
    (routing.core.kinds.DIALECT_KINDS), set once per class: the schema and the adapters read one list.
    """

    name = "base"
    kinds: frozenset[str] = frozenset()
    native: frozenset[str] = frozenset()  # the client protocols its upstream speaks itself (NATIVE_PROTOCOLS)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kinds = DIALECT_KINDS.get(cls.name, frozenset())
        cls.native = NATIVE_PROTOCOLS.get(cls.name, frozenset())

    # Whether the upstream honours `stream_options.include_usage`: the gateway then asks for the
    # usage frame on every stream and keeps it from clients that did not ask (docs/metrics.md#usage-records).
    stream_usage_option = False
    # Whether `authorize` must run before each send (credentials fetched asynchronously, e.g. an
    # OAuth access token); the others cost nothing for it.
    authorizes = False

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        raise NotImplementedError

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        raise NotImplementedError

    def speaks(self, protocol: str, model: ModelSpec) -> bool:
        """Whether `model`'s upstream speaks the client's `protocol` itself (a passthrough, no translation)."""
        return protocol in self.native

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
        """The upstream request for a client's own body in a protocol this dialect `speaks` (only `model`
        replaced by the caller); `beta` is the client's `anthropic-beta` header, for APIs that take it;
        `encoded`, when given, is `payload` as the client's own bytes, sent instead of encoding it again;
        `beta_query`, the client called with `?beta=true` (Anthropic's beta endpoint), for APIs that take it."""
        raise unsupported(self.name, "messages", model)

    async def authorize(
        self, prepared: PreparedRequest, provider: ProviderSpec, api_key: str | None, tokens: TokenSource
    ) -> PreparedRequest:
        """The request with credentials that need I/O to obtain (only when `authorizes`). `tokens` is the
        serving process's cache of them (the transport's), so no adapter keeps state of its own."""
        return prepared

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        """Upstream SSE bytes -> OpenAI SSE bytes. Identity unless overridden."""
        return chunks

    def failure(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamFailure:
        """The classified failure of a non-2xx answer (docs/errors.md); by status unless overridden."""
        return failure_from_response(status, headers, body)

    def health_url(self, provider: ProviderSpec) -> str:
        return join_url(provider.base_url, provider.health_check_path or "/models")

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The credentials this dialect sends; the health probe sends them too."""
        return {"Authorization": "Bearer " + api_key} if api_key else {}

    def probe_headers(self, provider: ProviderSpec) -> dict[str, str]:
        """Headers of the health probe, so a wrong key shows up as "down" before traffic does."""
        return self.auth_headers(provider.api_key)
