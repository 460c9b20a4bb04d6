"""Vertex AI: Gemini and Anthropic models of a Google Cloud project (docs/providers.md#vertex).

base_url is the project's location root,
`https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`.
A model whose upstream name starts with `claude` is Anthropic-on-Vertex
(`publishers/anthropic/models/{m}:rawPredict` / `:streamRawPredict`, the Anthropic
Messages body without `model` and with `anthropic_version: vertex-2023-10-16`, through
the anthropic translation); any other is a Google model (`publishers/google/models/{m}
:generateContent` / `:streamGenerateContent?alt=sse`, the Gemini shapes).

The provider's secret (its env var or stored key) is the service-account JSON.
`ServiceAccountTokens` exchanges a JWT signed with its private key for an access token
at the `token_uri` the JSON names (google-auth does the signing and the exchange), keeps
it per service account and refreshes it `REFRESH_MARGIN_S` before it expires, one
exchange at a time. The token goes only into the request's Authorization header; it is
never logged, and errors of the exchange carry no secret.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import orjson

from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.dialects import anthropic_translation, gemini_translation
from routing.upstream.dialects.base import (
    Dialect,
    ParsedResponse,
    PreparedRequest,
    TokenSource,
    encode,
    join_url,
    load_json,
    unsupported,
)

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ANTHROPIC_VERSION = "vertex-2023-10-16"
REFRESH_MARGIN_S = 300.0  # refresh this long before expiry, so no request carries a token about to lapse


def is_anthropic(upstream_model: str) -> bool:
    return upstream_model.startswith("claude")


def _exchange(info: dict[str, Any]) -> tuple[str, float]:
    """(access token, seconds it stays valid): google-auth signs the JWT and posts it to info's token_uri."""
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
    creds.refresh(Request())
    expiry = creds.expiry  # naive UTC
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    lifetime = (expiry - now).total_seconds() if expiry is not None else 3600.0
    return str(creds.token), lifetime


class ServiceAccountTokens:
    """Access tokens per service account, exchanged once and refreshed before expiry.

    `clock` (monotonic seconds) and `exchange` are injectable for tests; the exchange
    runs in a thread (google-auth is synchronous), and one lock per account makes
    concurrent requests wait for the same exchange instead of starting their own.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        exchange: Callable[[dict[str, Any]], tuple[str, float]] = _exchange,
    ) -> None:
        self.clock = clock
        self.exchange = exchange
        self.exchanges = 0  # how many exchanges ran (diagnostics, tests)
        self._tokens: dict[str, tuple[str, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _fresh(self, key: str) -> str | None:
        held = self._tokens.get(key)
        if held is not None and self.clock() < held[1] - REFRESH_MARGIN_S:
            return held[0]
        return None

    async def token(self, secret: str | None, provider: str) -> str:
        """The access token for this service-account JSON; UpstreamFailure when there is none."""
        if not secret:
            raise _auth_failure(provider, "it has no service-account JSON (set its api_key_env or stored key)")
        key = hashlib.sha256(secret.encode()).hexdigest()
        token = self._fresh(key)
        if token is not None:
            return token
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            token = self._fresh(key)
            if token is not None:
                return token
            info = _service_account(secret, provider)
            try:
                token, lifetime = await asyncio.to_thread(self.exchange, info)
            except Exception as exc:  # google.auth.exceptions.*, requests errors: no secret in their text
                raise _auth_failure(provider, f"the token exchange failed ({type(exc).__name__}: {exc})") from None
            self.exchanges += 1
            self._tokens[key] = (token, self.clock() + lifetime)
            return token

    def clear(self) -> None:
        self._tokens.clear()
        self._locks.clear()


def _service_account(secret: str, provider: str) -> dict[str, Any]:
    try:
        info = orjson.loads(secret)
    except orjson.JSONDecodeError:
        info = None
    if not isinstance(info, dict) or not {"client_email", "private_key", "token_uri"} <= info.keys():
        raise _auth_failure(provider, "its secret is not a service-account JSON (client_email, private_key, token_uri)")
    return info


def _auth_failure(provider: str, why: str) -> UpstreamFailure:
    """An authentication problem of the configuration: a client-class failure (no retry, no breaker charge)."""
    message = f"cannot authenticate to Vertex AI provider {provider!r}: {why}; fix the provider's credentials"
    body = orjson.dumps({"error": {"message": message, "type": "authentication_error", "code": "upstream_auth"}})
    return UpstreamFailure(FailureKind.UPSTREAM_4XX, message, 401, None, body)


class VertexDialect(Dialect):
    name = "vertex"
    authorizes = True

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
        if is_anthropic(model.upstream_model):
            payload = anthropic_translation.anthropic_request(body, model.upstream_model, stream)
            return self.prepare_anthropic(payload, model.upstream_model, base_url, stream)
        url = gemini_shapes_url(base_url, quote(model.upstream_model, safe="-._@"), stream)
        headers = {"Content-Type": "application/json"}
        return PreparedRequest("POST", url, headers, encode(gemini_translation.gemini_request(body)))

    def prepare_anthropic(
        self, payload: dict[str, Any], upstream_model: str, base_url: str, stream: bool
    ) -> PreparedRequest:
        """The rawPredict request for an Anthropic Messages body (also /v1/messages' passthrough):
        the model goes in the URL, not the body, and `anthropic_version` is Vertex's."""
        body = {k: v for k, v in payload.items() if k != "model"}
        body["anthropic_version"] = ANTHROPIC_VERSION
        method = ":streamRawPredict" if stream else ":rawPredict"
        url = join_url(base_url, f"/publishers/anthropic/models/{quote(upstream_model, safe='-._@')}") + method
        return PreparedRequest("POST", url, {"Content-Type": "application/json"}, encode(body))

    def speaks(self, protocol: str, model: ModelSpec) -> bool:
        """Vertex speaks Anthropic's Messages API for the Claude models only."""
        return protocol in self.native and is_anthropic(model.upstream_model)

    def prepare_native(
        self,
        payload: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        beta: str | None,
        encoded: bytes | None = None,
    ) -> PreparedRequest:
        """The client's Messages body at :rawPredict (the access token is added by `authorize`; Vertex takes no
        `anthropic-beta`)."""
        return self.prepare_anthropic(payload, model.upstream_model, base_url, payload.get("stream") is True)

    async def authorize(
        self, prepared: PreparedRequest, provider: ProviderSpec, api_key: str | None, tokens: TokenSource
    ) -> PreparedRequest:
        """The request with a Bearer access token of the service account whose JSON is `api_key`, from the
        process's token cache `tokens` (a `ServiceAccountTokens`, held by the transport)."""
        token = await tokens.token(api_key, provider.name)
        headers = {**prepared.headers, "Authorization": "Bearer " + token}
        return PreparedRequest(prepared.method, prepared.url, headers, prepared.body, prepared.context)

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        data = load_json(body, model)
        if is_anthropic(model.upstream_model):
            out, prompt, completion = anthropic_translation.chat_completion_of(data, model.upstream_model)
        else:
            out, prompt, completion = gemini_translation.chat_completion_of(data, model, body)
        return ParsedResponse(orjson.dumps(out), (prompt, completion))

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        if is_anthropic(model.upstream_model):
            return anthropic_translation.translate_sse(chunks, model)
        return gemini_translation.translate_sse(chunks, model)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {}  # a Bearer access token, added per request by `authorize`

    def health_url(self, provider: ProviderSpec) -> str:
        return join_url(provider.base_url, provider.health_check_path or "/publishers/google/models")


def gemini_shapes_url(base_url: str, name: str, stream: bool) -> str:
    method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
    return join_url(base_url, f"/publishers/google/models/{name}") + method
