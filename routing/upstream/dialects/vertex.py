"""Vertex AI: Gemini and Anthropic models of a Google Cloud project (docs/providers.md#vertex).

base_url is the project's location root,
`https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`.
A model whose upstream name starts with `claude` is Anthropic-on-Vertex
(`publishers/anthropic/models/{m}:rawPredict` / `:streamRawPredict`, the Anthropic
Messages body without `model` and with `anthropic_version: vertex-2023-10-16`, through
routing.upstream.translate.chat_to_anthropic); any other is a Google model (`publishers/google/models/{m}
:generateContent` / `:streamGenerateContent?alt=sse`, routing.upstream.translate.chat_to_gemini).

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
import functools
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import orjson

from routing.config.addresses import url_problem
from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.core.errors import TOKEN_EXCHANGE_FAILED
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.prices import token_classes
from routing.upstream.blocking import TOKEN_EXCHANGE_THREADS, TOKEN_EXCHANGE_TIMEOUT_S, BlockingPool, PoolBusy
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
from routing.upstream.translate import chat_to_anthropic, chat_to_gemini

log = logging.getLogger("switchboard.upstream")
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ANTHROPIC_VERSION = "vertex-2023-10-16"
REFRESH_MARGIN_S = 300.0  # refresh this long before expiry, so no request carries a token about to lapse


def is_anthropic(upstream_model: str) -> bool:
    return upstream_model.startswith("claude")


def _exchange(info: dict[str, Any], timeout_s: float = TOKEN_EXCHANGE_TIMEOUT_S) -> tuple[str, float]:
    """(access token, seconds it stays valid): google-auth signs the JWT and posts it to info's token_uri.

    Runs on the token-exchange pool's thread; every socket operation waits at most `timeout_s` (google-auth's
    default is 120 s). What the endpoint or the connection did becomes an `ExchangeError` of the matching kind.
    """
    import requests
    from google.auth import exceptions
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
    try:
        creds.refresh(functools.partial(Request(), timeout=timeout_s))
    except exceptions.RefreshError as exc:  # the endpoint answered with an error
        kind = FailureKind.UPSTREAM_5XX if exc.retryable else FailureKind.AUTHENTICATION
        raise ExchangeError(kind, f"the token endpoint refused the exchange: {exc}") from None
    except exceptions.TransportError as exc:  # no answer: refused, reset, timed out, TLS
        timed_out = isinstance(exc.__cause__, requests.Timeout)
        kind = FailureKind.CONNECT_TIMEOUT if timed_out else FailureKind.CONNECT_ERROR
        raise ExchangeError(kind, f"the token endpoint did not answer: {exc}") from None
    expiry = creds.expiry  # naive UTC
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    lifetime = (expiry - now).total_seconds() if expiry is not None else 3600.0
    return str(creds.token), lifetime


class ExchangeError(Exception):
    """A token exchange that gave no token: `kind` says whose fault it is; the text is for the operators' log only
    (it names the endpoint's host, port and path)."""

    def __init__(self, kind: FailureKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class ServiceAccountTokens:
    """Access tokens per service account, exchanged once and refreshed before expiry.

    The exchange (google-auth is synchronous) runs on `pool`, the process's token-exchange pool
    (routing.upstream.blocking), never on the loop's default pool. At most one exchange per account
    is in flight: concurrent requests, and requests that come after one gave up waiting, wait for
    the same one (each at most the pool's timeout) instead of starting their own, so a token endpoint
    that never answers holds one thread per account, not one per request. `clock` (monotonic seconds)
    and `exchange` are injectable for tests.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        exchange: Callable[[dict[str, Any]], tuple[str, float]] | None = None,
        pool: BlockingPool | None = None,
    ) -> None:
        self.clock = clock
        self.pool = pool or BlockingPool("token-exchange", TOKEN_EXCHANGE_THREADS, TOKEN_EXCHANGE_TIMEOUT_S)
        self.exchange = exchange or functools.partial(_exchange, timeout_s=self.pool.timeout_s)
        self.exchanges = 0  # how many exchanges gave a token (diagnostics, tests)
        self._tokens: dict[str, tuple[str, float]] = {}
        self._pending: dict[str, asyncio.Future[tuple[str, float]]] = {}

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
        pending = self._pending.get(key)
        if pending is None or pending.get_loop() is not asyncio.get_running_loop():
            pending = self._start(key, _service_account(secret, provider), provider)
        try:
            async with asyncio.timeout(self.pool.timeout_s):
                return (await asyncio.shield(pending))[0]
        except TimeoutError:
            raise _exchange_failure(provider, FailureKind.CONNECT_TIMEOUT) from None
        except ExchangeError as exc:
            raise _exchange_failure(provider, exc.kind) from None
        except Exception:  # noqa: BLE001 - a key google-auth cannot load, an injected exchange's error (logged)
            raise _exchange_failure(provider, FailureKind.AUTHENTICATION) from None

    def _start(self, key: str, info: dict[str, Any], provider: str) -> asyncio.Future[tuple[str, float]]:
        """Begin the exchange for one account on the pool (the address guard first: docs/security.md#addresses)."""
        refused = url_problem(str(info["token_uri"]))
        if refused is not None:
            log.warning("Vertex AI provider %r: not exchanging its token: token_uri %s", provider, refused)
            raise _exchange_failure(provider, FailureKind.AUTHENTICATION)
        try:
            pending = self.pool.submit(self.exchange, info)
        except PoolBusy as exc:
            log.warning("Vertex AI provider %r: token exchange not started: %s", provider, exc)
            raise _exchange_failure(provider, FailureKind.CONNECT_ERROR) from None
        self._pending[key] = pending
        pending.add_done_callback(functools.partial(self._settle, key, provider))
        return pending

    def _settle(self, key: str, provider: str, pending: asyncio.Future[tuple[str, float]]) -> None:
        """An exchange ended (on the loop): keep its token, or log why it failed, once per exchange."""
        if self._pending.get(key) is pending:
            del self._pending[key]
        if pending.cancelled():
            return
        exc = pending.exception()
        if exc is None:
            token, lifetime = pending.result()
            self.exchanges += 1
            self._tokens[key] = (token, self.clock() + lifetime)
            return
        why = str(exc) if isinstance(exc, ExchangeError) else f"{type(exc).__name__}: {exc}"
        log.warning("token exchange of Vertex AI provider %r failed: %s", provider, why)

    def clear(self) -> None:
        self._tokens.clear()
        self._pending.clear()


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


def _exchange_failure(provider: str, kind: FailureKind) -> UpstreamFailure:
    """What the client learns of a failed exchange: the catalogue's words, no address or library text.

    A token endpoint that fails or does not answer is the provider's fault (retried, failed over, charged to
    its breaker like a connect failure); a refusal of the credentials is the configuration's (a 401, never
    retried)."""
    if kind is FailureKind.AUTHENTICATION:
        return _auth_failure(provider, TOKEN_EXCHANGE_FAILED)
    status = 502 if kind is FailureKind.UPSTREAM_5XX else None
    return UpstreamFailure(kind, f"Vertex AI provider {provider!r}: {TOKEN_EXCHANGE_FAILED}", status)


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
            dropped = chat_to_anthropic.gaps(body, model)
            payload = chat_to_anthropic.anthropic_request(body, model.upstream_model, stream, model.max_output_tokens)
            prepared = self.prepare_anthropic(payload, model.upstream_model, base_url, stream)
            return replace(prepared, dropped=dropped) if dropped else prepared
        url = gemini_shapes_url(base_url, quote(model.upstream_model, safe="-._@"), stream)
        headers = {"Content-Type": "application/json"}
        dropped = chat_to_gemini.gaps(body, model)
        return PreparedRequest("POST", url, headers, encode(chat_to_gemini.gemini_request(body, model)), None, dropped)

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
        beta_query: bool = False,
    ) -> PreparedRequest:
        """The client's Messages body at :rawPredict (the access token is added by `authorize`; Vertex takes no
        `anthropic-beta` and no `?beta=true`)."""
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
            out, prompt, completion = chat_to_anthropic.chat_completion_of(data, model.upstream_model)
            classes = token_classes(data.get("usage"))  # Anthropic's own, cache writes included
        else:
            out, prompt, completion = chat_to_gemini.chat_completion_of(data, model, body)
            classes = token_classes(out.get("usage"))
        return ParsedResponse(orjson.dumps(out), (prompt, completion), classes)

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        if is_anthropic(model.upstream_model):
            return chat_to_anthropic.translate_sse(chunks, model)
        return chat_to_gemini.translate_sse(chunks, model)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {}  # a Bearer access token, added per request by `authorize`

    def health_url(self, provider: ProviderSpec) -> str:
        return join_url(provider.base_url, provider.health_check_path or "/publishers/google/models")


def gemini_shapes_url(base_url: str, name: str, stream: bool) -> str:
    method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
    return join_url(base_url, f"/publishers/google/models/{name}") + method
