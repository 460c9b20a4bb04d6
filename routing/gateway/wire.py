"""ASGI wire helpers of the request path: type aliases, fixed headers, sending, the body, disconnects."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from routing.core import errors
from routing.core.body_progress import BodyProgress
from routing.core.errors import GatewayError
from routing.runtime.accounting import Context

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

log = logging.getLogger("switchboard.edge")

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


async def read_body(
    receive: Receive, content_length: int, ctx: Context, limit: int, window_s: float = 0.0, min_bytes: int = 1
) -> bytes:
    """The whole request body, refused early when it is over `limit` bytes, or (with `window_s`) when it
    brings less than `min_bytes` in a window of that long (docs/security.md#server-edge): 408.

    A body that comes in one message (nearly all) pays a clock read: the progress deadline is armed
    only once a body proves to come in several, counted from when the reading began."""
    if content_length > limit:
        raise errors.request_too_large(limit)
    loop = asyncio.get_running_loop()
    began = loop.time()
    message = await receive()
    chunk = message.get("body", b"")
    if message["type"] == "http.disconnect" or len(chunk) > limit:  # `_chunk`'s refusals, inline for the first
        chunk = _chunk(message, ctx, limit, 0)  # raises
    if not message.get("more_body", False):
        return chunk
    if window_s <= 0:
        return await _read_rest(receive, ctx, limit, [chunk], None)
    progress = BodyProgress(window_s, min_bytes, began)
    progress.fed(len(chunk), loop.time())
    try:
        return await _read_rest(receive, ctx, limit, [chunk], progress)
    except TimeoutError:
        log.warning(
            "request %s: body slower than %d bytes per %g s; answered 408 and closed",
            ctx.request_id,
            min_bytes,
            window_s,
        )
        raise errors.request_body_timeout(window_s, min_bytes) from None


def _chunk(message: Message, ctx: Context, limit: int, size: int) -> bytes:
    """One body message's bytes, `size` read before it; the client gone or the limit passed raise."""
    if message["type"] == "http.disconnect":
        ctx.disconnected = True
        raise ClientGone()
    chunk = message.get("body", b"")
    if size + len(chunk) > limit:
        raise errors.request_too_large(limit)
    return chunk


async def _read_rest(
    receive: Receive, ctx: Context, limit: int, chunks: list[bytes], progress: BodyProgress | None
) -> bytes:
    """The messages after the first, under the progress deadline if any (TimeoutError when it passes)."""
    size = len(chunks[0])
    loop = asyncio.get_running_loop()
    async with asyncio.timeout_at(progress.deadline if progress is not None else None) as deadline:
        while True:
            message = await receive()
            chunk = _chunk(message, ctx, limit, size)
            size += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
            if progress is not None and progress.fed(len(chunk), loop.time()):
                deadline.reschedule(progress.deadline)
    return b"".join(chunks)


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
