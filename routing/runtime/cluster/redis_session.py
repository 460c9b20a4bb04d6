"""The reconnecting loop of the parts that share state over Redis from a background task (breaker
sync, affinity pins): one session at a time, any Redis error reported to the part and retried with
exponential backoff, and a cancellation that a redis-py call swallowed still ending the task.

Nothing here runs on the request path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 5.0


def client(redis_url: str, timeout_s: float) -> Any:
    """A redis-py asyncio client that fails fast: every call bounded, no retries of its own."""
    import redis.asyncio as aioredis  # reason: only processes with REDIS_URL load redis-py
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aioredis.Redis.from_url(
        redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )


def stop_if_cancelled() -> None:
    """End the calling task if it was cancelled and a client call swallowed the cancellation.

    redis-py can return normally from a call whose task is being cancelled (the CancelledError is
    lost inside it); a loop that only stops on CancelledError then runs on, and the session's
    teardown, which waits for its reader and writer, never ends. Python still counts the request
    (`Task.cancelling`; asyncio.timeout takes back its own), so the loops look at it each pass."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def reconnecting(
    session: Callable[[], Awaitable[None]],
    down: Callable[[BaseException], None],
    clock: Callable[[], float],
) -> NoReturn:
    """Run `session` until cancelled; after any error, `down(error)` and a new session after a backoff
    that doubles up to BACKOFF_MAX_S (and starts over once a session had been up a while)."""
    delay = BACKOFF_MIN_S
    while True:
        stop_if_cancelled()
        started = clock()
        try:
            await session()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any Redis trouble: the part goes local, retried later
            down(exc)
        if clock() - started > BACKOFF_MAX_S * 2:
            delay = BACKOFF_MIN_S  # the connection had been up a while: start the backoff over
        await asyncio.sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX_S)
