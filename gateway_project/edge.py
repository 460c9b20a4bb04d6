"""The server edge's limits, shared by both servers (docs/security.md#server-edge).

A request body is bounded while it is read: `SWITCHBOARD_MAX_BODY_BYTES` on the API
(`/v1`, read by the gateway's own reader), `SWITCHBOARD_MAX_PAGE_BODY_BYTES` on the
Django side (admin, dashboard, /metrics), whose handler would otherwise read any body
in full, to memory and then to a temporary file, before a view could refuse it.
`limit_page_bodies` wraps that side for any ASGI server; daphne, which buffers a whole
body before it calls the application, gets the same limits in its channel
(gateway_project/daphne_limits.py), uvicorn its timeouts and connection cap in
gateway_project/http_limits.py.

Slow clients: a request head must be complete `SWITCHBOARD_HEAD_TIMEOUT_S` after its
first byte (or after the connection opened), a body must bring at least
`SWITCHBOARD_BODY_MIN_BYTES` more in every `SWITCHBOARD_BODY_TIMEOUT_S` (routing.core.body_progress:
a byte now and then is no progress), an idle keep-alive connection is closed after
`SWITCHBOARD_KEEPALIVE_S`; each process holds at most `max_connections` connections,
the file-descriptor limit less `SWITCHBOARD_RESERVED_FDS` kept for the usage journal,
the spool, the database and Redis.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from routing.core.endpoints import route
from routing.core.errors import request_too_large
from routing.gateway.paths import is_gateway_path
from routing.upstream.translate.shared import error_body  # no Django: the servers import this module first

log = logging.getLogger("switchboard.edge")

LINGER_S = 1.0  # how long the rest of a refused request is read and dropped before closing
# Connections the kernel queues for a process to accept: uvicorn's default. A burst of new
# connections beyond the queue is dropped by the kernel (SYN retried a second later, or reset).
LISTEN_BACKLOG = 2048
# The client protocol whose errors are Anthropic's (routing.gateway.messages.PROTOCOL; the gateway
# imports Django, which a server loads this module before).
MESSAGES_PROTOCOL = "messages"


class SlowBodyLog:
    """One log line per sweep that closed connections whose request body came too slowly, not one per
    connection (a few thousand trickling clients would flood the log)."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = 0

    def swept(self) -> None:
        if self.closed:
            lim = limits()
            log.warning(
                "closed %d connections whose request body brought less than %d bytes in %g s",
                self.closed,
                lim.body_min_bytes,
                lim.body_timeout_s,
            )
            self.closed = 0


@dataclass(frozen=True)
class Limits:
    api_body_bytes: int
    page_body_bytes: int
    head_timeout_s: float
    body_timeout_s: float
    body_min_bytes: int
    keepalive_s: float
    max_connections: int
    max_header_bytes: int
    max_headers: int


def _setting(name: str, default: float) -> float:
    """A setting from Django's settings, or the environment when they are not importable
    (a protocol class loaded by a server before the application)."""
    try:
        from django.conf import settings

        return float(getattr(settings, name))
    except Exception:  # noqa: BLE001 - settings not configured: the same knob from the environment
        return float(os.environ.get(name, default))


def connection_cap(configured: int, reserved: int) -> int:
    """Connections one process may hold: `configured` (0: no own cap), never more than the
    soft file-descriptor limit less `reserved` descriptors (journal, spool, database, Redis,
    listening sockets), so a flood of connections cannot starve them."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    by_fds = max(16, soft - reserved) if soft != resource.RLIM_INFINITY else 1 << 30
    return min(configured, by_fds) if configured > 0 else by_fds


@functools.cache
def limits() -> Limits:
    """The edge's limits, read once per interpreter (settings a server reads at boot, never changed live)."""
    return Limits(
        api_body_bytes=int(_setting("SWITCHBOARD_MAX_BODY_BYTES", 10 * 1024 * 1024)),
        page_body_bytes=int(_setting("SWITCHBOARD_MAX_PAGE_BODY_BYTES", 1024 * 1024)),
        head_timeout_s=_setting("SWITCHBOARD_HEAD_TIMEOUT_S", 10.0),
        body_timeout_s=_setting("SWITCHBOARD_BODY_TIMEOUT_S", 10.0),
        body_min_bytes=int(_setting("SWITCHBOARD_BODY_MIN_BYTES", 1024)),
        keepalive_s=_setting("SWITCHBOARD_KEEPALIVE_S", 5.0),
        max_connections=connection_cap(
            int(_setting("SWITCHBOARD_MAX_CONNECTIONS", 0)), int(_setting("SWITCHBOARD_RESERVED_FDS", 256))
        ),
        max_header_bytes=int(_setting("SWITCHBOARD_MAX_HEADER_BYTES", 64 * 1024)),
        max_headers=int(_setting("SWITCHBOARD_MAX_HEADERS", 100)),
    )


def body_limit(path: str) -> int:
    """The body limit of a request path: the API's, or the smaller one of the Django side."""

    lim = limits()
    return lim.api_body_bytes if is_gateway_path(path) else lim.page_body_bytes


def too_large_body(limit: int, path: str = "") -> bytes:
    """The 413 answer's JSON body, from the error catalogue; in Anthropic's error shape where the
    path's row of the endpoint table speaks the Messages protocol, as the gateway itself answers
    there (docs/anthropic-messages.md)."""

    error = request_too_large(limit)
    row = route(path)
    if row is not None and row.protocol == MESSAGES_PROTOCOL:
        return error_body(error.status, error.message)
    return error.body()


def too_large_response(limit: int, path: str = "") -> bytes:
    """A whole HTTP/1.1 413 answer that closes the connection (for a server's own refusal)."""
    body = too_large_body(limit, path)
    head = (
        "HTTP/1.1 413 Content Too Large\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class CapLog:
    """One log line when a process reaches its connection cap, one when it is below it again
    (not one per connection: a flood would flood the log)."""

    def __init__(self) -> None:
        self.at_cap = False
        self.closed = 0

    def full(self, cap: int) -> None:
        self.closed += 1
        if not self.at_cap:
            self.at_cap = True
            log.warning(
                "%d connections open, the cap of this process (SWITCHBOARD_MAX_CONNECTIONS, at most the file "
                "limit less SWITCHBOARD_RESERVED_FDS): closing the connection that waited longest for its "
                "request head for each new one (docs/security.md#server-edge)",
                cap,
            )

    def below(self) -> None:
        if self.at_cap:
            self.at_cap = False
            log.warning("below the connection cap again, after closing %d connection(s) at it", self.closed)
            self.closed = 0


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _refuse(send: Send, limit: int) -> None:
    body = too_large_body(limit)
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def limit_page_bodies(app: App) -> App:
    """`app` (Django's handler) behind the page body limit: a `Content-Length` over it is
    answered 413 before anything is read; a body without one (chunked) is counted as it
    arrives and answered 413 the moment it passes the limit; the application then sees
    the client gone and stops. The server closes the connection (`connection: close`)."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        limit = limits().page_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    await _refuse(send, limit)
                    return
                break
        received = 0
        refused = False

        async def receive_limited() -> dict[str, Any]:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    await _refuse(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def send_unless_refused(message: dict[str, Any]) -> None:
            if not refused:
                await send(message)

        await app(scope, receive_limited, send_unless_refused)

    return limited
