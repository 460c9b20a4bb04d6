"""The one way the gateway talks to upstreams: status, headers and a byte stream.

aiohttp directly (the README's Performance section: about 3x the throughput of httpx
at a quarter of its latency on this machine). One pooled session is shared by every
provider; a provider that sets its own `connect_timeout_ms` gets a session (and a
pool) of its own (docs/resilience.md#r9), so a slow-to-connect provider cannot starve the
shared pool. Sessions are created lazily on the running loop.

Only the connect phase is timed here (connect failures become `UpstreamFailure`
CONNECT_TIMEOUT / CONNECT_ERROR); first-token, idle and total deadlines belong to
the caller, which cancels the task. Cancellation and early stops *close* the
connection rather than returning it to the pool half-read, so the upstream sees
the disconnect at once (docs/resilience.md#r7).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from routing.config.addresses import address_problem, private_allowed, url_problem
from routing.config.secrets import redact_url
from routing.config.snapshot import ProviderSpec
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.blocking import BlockingPool, BlockingPools, PoolBusy
from routing.upstream.dialects.vertex import ServiceAccountTokens

log = logging.getLogger("switchboard.upstream")
# Seconds between two "could not reach" log lines of one provider: an outage fails every request.
CONNECT_LOG_EVERY_S = 10.0

POOL_LIMIT = 512  # total connections per session; far above what 2 cores can drive
KEEPALIVE_S = 30.0
DRAIN_BYTES = 64 * 1024  # what close() reads past a stream's protocol end to keep its connection
NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class UpstreamResponse:
    """An upstream answer whose headers have arrived; the body is read on demand.

    Call exactly one of `read()` / `iter_chunks()`, and `close()` when done with it
    (safe to call more than once). A fully read body returns the connection to the
    pool; anything else (error, cancellation, early stop) closes it.
    """

    __slots__ = ("status", "headers", "_resp")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status: int = resp.status
        self.headers: Mapping[str, str] = resp.headers  # CIMultiDictProxy: case-insensitive

    async def read(self) -> bytes:
        """The whole body; a connection broken mid-body is a provider fault."""
        resp = self._resp
        try:
            body = await resp.read()
        except aiohttp.ClientError as exc:
            resp.close()
            raise UpstreamFailure(
                FailureKind.CONNECT_ERROR,
                f"upstream connection broke while reading the response body: {exc!r}",
                status=self.status,
            ) from exc
        except BaseException:
            resp.close()
            raise
        resp.release()
        return body

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (no re-framing, no buffering).

        A connection broken mid-stream raises UpstreamFailure(STREAM_ERROR); the
        stream layer decides what that means before/after commit.
        """
        resp = self._resp
        read = resp.content.readany  # what iter_any() calls, without its iterator object per chunk
        complete = left = False
        try:
            while chunk := await read():
                try:
                    yield chunk
                except GeneratorExit:  # closed between chunks: the owner's close() decides
                    left = True
                    raise
            complete = True
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(
                FailureKind.STREAM_ERROR,
                f"upstream stream broke: {exc!r}",
                status=self.status,
            ) from exc
        finally:
            if complete:
                resp.release()
            elif not left:
                resp.close()

    @property
    def at_end(self) -> bool:
        """The transfer has ended or the connection is gone: `close()` has nothing to wait for."""
        resp = self._resp
        return resp.closed or resp.content.is_eof()

    async def close(self, drain_s: float = 0.0) -> None:
        """Free the connection: back to the pool if the body was consumed, else closed.

        `drain_s`: the caller saw the body end as its protocol says (a translated stream's last
        event, read before the transfer's own end); wait up to that long, and DRAIN_BYTES, for the
        transfer to end, so the connection goes back to the pool and the next request does not pay
        a new connect (and handshake) before its first byte (docs/performance.md#drain-after). Only the
        process's drains (routing.runtime.background.Drains) pass it, after the client has its answer."""
        resp = self._resp
        if resp.closed:
            return
        content = resp.content
        try:
            if drain_s > 0 and not content.is_eof():
                async with asyncio.timeout(drain_s):
                    left = DRAIN_BYTES
                    while left > 0 and (chunk := await content.readany()):
                        left -= len(chunk)
        except (TimeoutError, aiohttp.ClientError):
            pass
        finally:
            if content.is_eof():
                resp.release()
            else:
                resp.close()

    def __repr__(self) -> str:
        return f"<UpstreamResponse {self.status}>"


class AddressRefused(OSError):
    """A host name that resolves to an address the upstream address guard refuses."""


class GuardedResolver(AbstractResolver):
    """Upstream host names resolved on the process's resolve pool, never on the loop's default pool (aiohttp's own
    resolver uses that one), and each answer checked by the address guard: a name that points into the metadata
    range (or, with SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE=false, at a private address) is not connected to. aiohttp
    caches the answers (`ttl_dns_cache`), so this runs once per host per 5 minutes, not per request."""

    def __init__(self, pool: BlockingPool, lookup: Callable[..., list]) -> None:
        self.pool = pool
        self.lookup = lookup  # socket.getaddrinfo's signature (tests give their own)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            infos = await self.pool.run(self.lookup, host, port, family, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
        except PoolBusy as exc:
            raise OSError(f"looking up {host!r} was not started: {exc}") from exc
        allow = private_allowed()
        results: list[ResolveResult] = []
        for fam, _, proto, _, address in infos:
            refused = address_problem(ipaddress.ip_address(address[0].split("%", 1)[0]), allow)
            if refused is not None:
                raise AddressRefused(f"{host!r} resolves to {refused}")
            results.append(
                ResolveResult(
                    hostname=host, host=address[0], port=address[1], family=fam, proto=proto, flags=NUMERIC_FLAGS
                )
            )
        return results

    async def close(self) -> None:
        return None


class Transport:
    """Pooled aiohttp sessions: one shared, one per provider with its own connect timeout."""

    def __init__(self, pool_limit: int = POOL_LIMIT, blocking: BlockingPools | None = None) -> None:
        self._pool_limit = pool_limit
        # The blocking calls of upstreams (token exchanges, name lookups) run on these pools, never on the
        # loop's default pool that the reload, spend reads and usage spill use (docs/security.md#blocking).
        self.blocking = blocking or BlockingPools()
        self.lookup: Callable[..., list] = socket.getaddrinfo  # name lookups, on `blocking.resolve`
        self._refused: dict[str, str | None] = {}  # URL -> why the address guard refuses its host (None: allowed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shared: aiohttp.ClientSession | None = None
        self._own: dict[tuple[str, int], aiohttp.ClientSession] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        # The process's access tokens of dialects that authorize (Vertex's service accounts): per process, not
        # per module, so a test's or a second process's tokens are its own (docs/architecture.md#composition-root).
        self.tokens = ServiceAccountTokens(pool=self.blocking.token_exchange)

    def _new_session(self, connect_timeout_s: float | None) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self.blocking.resolve, self._lookup),
            limit=self._pool_limit,
            limit_per_host=0,
            keepalive_timeout=KEEPALIVE_S,
            ttl_dns_cache=300,
        )
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_connect=connect_timeout_s),
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )

    def _lookup(self, *args: Any) -> list:
        return self.lookup(*args)

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            # Sessions are bound to the loop that made them (tests run one loop each);
            # mark the stale ones closed without touching the dead loop.
            for session in (self._shared, *self._own.values()):
                if session is not None and session.connector is not None:
                    session.connector._close()  # noqa: SLF001 (sync close; no awaiting on a dead loop)
            self._shared = None
            self._own.clear()
        self._loop = loop

    def session_for(self, provider: ProviderSpec) -> aiohttp.ClientSession:
        """The pool this provider uses (R9: its own when it sets connect_timeout_ms)."""
        if self._loop is not asyncio.get_running_loop():  # another loop (one per test): `_check_loop` rebinds
            self._check_loop()
        if provider.connect_timeout_ms is None:
            session = self._shared
            if session is None:
                session = self._shared = self._new_session(None)
            return session
        key = (provider.name, provider.connect_timeout_ms)
        session = self._own.get(key)
        if session is None:
            session = self._own[key] = self._new_session(provider.connect_timeout_ms / 1000)
        return session

    def _timeout(self, connect_timeout_s: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(connect_timeout_s)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_connect=connect_timeout_s)
            if len(self._timeouts) < 256:
                self._timeouts[connect_timeout_s] = timeout
        return timeout

    async def send(
        self,
        provider: ProviderSpec,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        connect_timeout_s: float,
    ) -> UpstreamResponse:
        """Send one request; return once the status line and headers have arrived.

        Raises UpstreamFailure(CONNECT_TIMEOUT) when connecting (pool wait, DNS, TCP,
        TLS) takes longer than `connect_timeout_s`, UpstreamFailure(CONNECT_ERROR)
        when the connection fails or drops before a response.
        """
        if self._refused.get(url, "") is not None:  # the URL's own host: a provider's, an org credential's, ...
            self._guard(provider, url)
        session = self.session_for(provider)
        try:
            resp = await session.request(
                method,
                url,
                headers=headers,
                data=body,
                # a cached timeout read here (a hit for every request but a timeout's first)
                timeout=self._timeouts.get(connect_timeout_s) or self._timeout(connect_timeout_s),
            )
        except (aiohttp.ServerTimeoutError, TimeoutError) as exc:  # ConnectionTimeoutError, sock_connect
            raise UpstreamFailure(
                FailureKind.CONNECT_TIMEOUT,
                f"connecting to provider {provider.name!r} took longer than {connect_timeout_s:g}s; "
                "check that the upstream is reachable or raise connect_timeout_ms",
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            _log_unreachable(provider.name, url, exc)
            raise UpstreamFailure(
                FailureKind.CONNECT_ERROR,
                f"could not reach provider {provider.name!r}: {client_reason(exc)}; retry later",
            ) from exc
        return UpstreamResponse(resp)

    def _guard(self, provider: ProviderSpec, url: str) -> None:
        """The address guard's second line (the first is validation): a base_url that names a refused address
        is never called, whatever let it into the snapshot. Checked once per URL (a configuration has few),
        so a request pays one dictionary lookup."""
        refused = self._refused.get(url, "")
        if refused == "":
            if len(self._refused) >= 4096:
                self._refused.clear()
            refused = self._refused[url] = url_problem(url)
            if refused is not None:
                log.warning(
                    "not calling provider %r at %s: its address is refused: %s",
                    provider.name,
                    redact_url(url),
                    refused,
                )
        if refused is not None:
            raise UpstreamFailure(
                FailureKind.UPSTREAM_4XX,
                f"provider {provider.name!r} names an address the gateway's upstream address guard refuses "
                "(docs/security.md#addresses); ask the gateway operator to fix its base_url",
                status=403,
            )

    def pools(self) -> dict[str, Any]:
        """Which sessions exist (for diagnostics and tests)."""
        return {"shared": self._shared, **{f"{name}:{ms}": s for (name, ms), s in self._own.items()}}

    async def retain(self, providers: Mapping[str, ProviderSpec]) -> None:
        """Close the own pools of providers that are gone or changed their connect timeout.

        Call after a snapshot swap, once in-flight requests of the old snapshot have had
        time to finish: closing a pool aborts its open connections.
        """
        keep = {(p.name, p.connect_timeout_ms) for p in providers.values() if p.connect_timeout_ms is not None}
        for key in [k for k in self._own if k not in keep]:
            await self._own.pop(key).close()

    async def aclose(self) -> None:
        """Close every pool (clean shutdown)."""
        sessions = [s for s in (self._shared, *self._own.values()) if s is not None]
        self._shared = None
        self._own.clear()
        loop = self._loop
        self._loop = None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for session in sessions:
            if running is loop:
                await session.close()
            elif session.connector is not None:
                session.connector._close()  # noqa: SLF001


def _describe(exc: BaseException) -> str:
    """The whole story, addresses included: for operators' logs only."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before answering"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error) or repr(exc)
    return str(exc) or repr(exc)


def client_reason(exc: BaseException) -> str:
    """Why a connection failed, in words that carry no URL, host or address.

    The message reaches API clients, who must learn that the provider failed but not
    where it lives (docs/security.md#urls); the address goes to the log (`_log_unreachable`).
    """
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before answering"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, AddressRefused):
        return "its address is refused by the gateway's upstream address guard (docs/security.md#addresses)"
    if isinstance(cause, socket.gaierror):
        return "its host name could not be resolved"
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno).lower()  # "connection refused", "no route to host"
    if isinstance(exc, aiohttp.ClientConnectionError):
        return "the connection failed"
    return f"the connection failed ({type(exc).__name__})"


_unreachable_logged: dict[str, float] = {}


def _log_unreachable(name: str, url: str, exc: BaseException) -> None:
    """One warning per provider per CONNECT_LOG_EVERY_S, with the (redacted) URL, for operators."""
    now = time.monotonic()
    if now - _unreachable_logged.get(name, -CONNECT_LOG_EVERY_S) < CONNECT_LOG_EVERY_S:
        return
    if len(_unreachable_logged) > 1024:
        _unreachable_logged.clear()
    _unreachable_logged[name] = now
    log.warning("could not reach provider %r at %s: %s", name, redact_url(url), _describe(exc))
