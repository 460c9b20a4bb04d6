"""ASGI wire helpers of the request path: type aliases, fixed headers, sending, the body, disconnects."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from routing.core import errors
from routing.core.errors import GatewayError
from routing.runtime.accounting import Context

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = (b"content-type", b"application/json")
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
# A request's cache result (docs/cache.md) -> its X-Switchboard-Cache value: a shared answer is a hit.
CACHE_HEADER = {"hit": b"hit", "miss": b"miss", "bypass": b"bypass", "coalesced": b"hit"}


class ClientGone(Exception):
    """The client disconnected before the answer was sent."""


async def send_response(send: Send, status: int, body: bytes, headers: Headers) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def answer_headers(ctx: Context, headers: Headers) -> Headers:
    """The gateway's own headers on every answer (docs/api.md#response-headers)."""
    headers.append((b"x-request-id", ctx.request_id.encode()))
    outcome = ctx.outcome
    if outcome is not None:
        link = outcome.link
        if link is not None:
            headers.append((b"x-switchboard-model-used", link.model.id.encode()))
            headers.append((b"x-switchboard-upstream-model", link.model.upstream_model.encode()))
            headers.append((b"x-switchboard-provider-used", link.model.provider.name.encode()))
        headers.append((b"x-switchboard-attempts", str(outcome.attempts).encode()))
        if outcome.fallback_reason and outcome.error is None:
            headers.append((b"x-switchboard-fallback", outcome.fallback_reason.encode()))
    if ctx.dropped:  # a translation went without these hints (docs/anthropic-messages.md#translation)
        headers.append((b"x-switchboard-dropped", ctx.dropped.encode()))
    if ctx.ratelimit is not None:  # only callers with limits (docs/limits.md#headers)
        headers.extend(ctx.ratelimit.headers())
    if ctx.cache:  # only models with a cache (docs/cache.md#header)
        headers.append((b"x-switchboard-cache", CACHE_HEADER[ctx.cache]))
    return headers


async def send_error(send: Send, ctx: Context, exc: GatewayError, body: bytes | None = None) -> None:
    """`exc` with the gateway's headers; `body` replaces its OpenAI-shaped body (another endpoint's shape)."""
    headers = answer_headers(ctx, [JSON])
    for name, value in (exc.headers or {}).items():
        headers.append((name.lower().encode(), str(value).encode()))
    try:
        await send_response(send, exc.status, exc.body() if body is None else body, headers)
    except Exception:  # noqa: BLE001 - the client is gone; nothing to tell it
        pass


async def read_body(receive: Receive, content_length: int, ctx: Context, limit: int) -> bytes:
    """The whole request body, refused early when it is over `limit` bytes."""
    if content_length > limit:
        raise errors.request_too_large(limit)
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ctx.disconnected = True
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise errors.request_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def watch_disconnect(receive: Receive, ctx: Context) -> asyncio.Task:
    """Cancel the request task as soon as the client goes away (docs/resilience.md#r7)."""
    task = asyncio.current_task()

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                ctx.disconnected = True
                if task is not None:
                    task.cancel()
                return

    return asyncio.get_running_loop().create_task(watch())


def worker_header() -> tuple[bytes, bytes]:
    """`X-Switchboard-Worker: <pid>` on /health answers: which worker process of a
    `manage.py serve --workers N` answered (docs/scale-out.md#workers)."""
    return (b"x-switchboard-worker", str(os.getpid()).encode())
