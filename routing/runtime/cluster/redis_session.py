"""What the parts that share state over Redis from a background task (breaker sync, affinity pins)
have in common: one session at a time on one pub/sub channel, any Redis error reported to the part
and retried with exponential backoff, one warning and the `switchboard_degraded` gauge for an
outage, and a cancellation that a redis-py call swallowed still ending the task.

`ChannelSync` is that skeleton; each part keeps only what it shares and how (`_ready`, `_read`,
`_write`, `_on_up`, `_on_down`). Nothing here runs on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, NoReturn
from urllib.parse import urlparse

from routing.config import live

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


def channel_name(prefix: str, redis_url: str, cluster: str) -> str:
    """`prefix` + the Redis db index + ":" + cluster: pub/sub is server-wide while keys are per db, so
    two deployments on one Redis server but different databases must not hear each other."""
    path = urlparse(redis_url).path.strip("/")
    return f"{prefix}{path or '0'}:{cluster}"


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


class ChannelSync:
    """One process's background task sharing a part's state over one Redis channel.

    A session subscribes to `channel`, lets the part get ready (`_ready`), counts as up, then runs the
    part's reader (messages heard) and writer (what to send) until either fails; any error ends the
    session, the part goes local (fail-open: `_down`) and `reconnecting` starts a new one. The
    request path never waits for any of it: it reads `connected` and the part's own memory.

    Subclasses name themselves with the class attributes below; the log lines read
    "Redis is unreachable (<error>): <alone> until it is back; requests are unaffected" once per
    outage and "Redis is reachable again: <shared> are shared again" once it is over.
    """

    name: ClassVar[str]  # in the error that ends a session: "the <name> session ended"
    part: ClassVar[str]  # the feature of `switchboard_degraded{component="redis"}`
    alone: ClassVar[str]  # what holds while Redis is gone ("breakers are per process")
    shared: ClassVar[str]  # what is shared again once it is back ("breaker transitions")
    log: ClassVar[logging.Logger]

    def __init__(self, redis_url: str, channel: str, timeout_s: float, clock: Callable[[], float]) -> None:
        self.redis_url = redis_url
        self.channel = channel
        self.timeout_s = timeout_s
        self.clock = clock
        self.connected = False  # a session is up (subscribed and ready): the part shares, else it works alone
        self.degraded = False  # an outage was reported and is not over

    async def run(self) -> None:
        """Sessions until cancelled; reconnect with backoff on any Redis error (the part is local meanwhile)."""
        await reconnecting(self._session, self._down, self.clock)

    def _client(self) -> Any:
        return client(self.redis_url, self.timeout_s)

    async def _session(self) -> None:
        conn = self._client()
        pubsub = conn.pubsub(ignore_subscribe_messages=True)
        try:
            async with asyncio.timeout(self.timeout_s):
                await pubsub.subscribe(self.channel)
            await self._ready(conn)
            stop_if_cancelled()  # wait_for (3.11) can lose a cancellation that comes as its call ends
            self._up()
            await self._exchange(pubsub, conn)
        finally:
            self.connected = False
            for closing in (pubsub.aclose(), conn.aclose()):
                try:
                    await asyncio.wait_for(closing, self.timeout_s)
                except Exception:  # noqa: BLE001 - the connection is gone anyway
                    pass

    async def _exchange(self, pubsub: Any, conn: Any) -> NoReturn:
        """Read and write side by side until one fails; both are stopped before the session ends."""
        reader = asyncio.ensure_future(self._read(pubsub))
        writer = asyncio.ensure_future(self._write(conn))
        try:
            done, _ = await asyncio.wait((reader, writer), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises the Redis error that ended the session
            raise ConnectionError(f"the {self.name} session ended")
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)

    def _up(self) -> None:
        self.connected = True
        if self.degraded:
            self.log.warning("Redis is reachable again: %s are shared again", self.shared)
        self.degraded = False
        live.set_degraded("redis", False, self.part)
        self._on_up()

    def _down(self, exc: BaseException) -> None:
        self.connected = False
        self._on_down()
        if not self.degraded:
            self.log.warning(
                "Redis is unreachable (%s): %s until it is back; requests are unaffected",
                exc or type(exc).__name__,
                self.alone,
            )
            self.degraded = True
            live.set_degraded("redis", True, self.part)

    # --------------------------------------------------------------- the part's own

    async def _ready(self, conn: Any) -> None:
        """After subscribing, before counting as up (e.g. load what Redis holds); raise to fail the session."""

    async def _read(self, pubsub: Any) -> None:
        """Handle what the channel brings until an error; must call `stop_if_cancelled` each pass."""
        raise NotImplementedError

    async def _write(self, conn: Any) -> None:
        """Send what the part has queued until an error; must call `stop_if_cancelled` each pass."""
        raise NotImplementedError

    def _on_up(self) -> None:
        """A session is up: e.g. re-send what other processes must know."""

    def _on_down(self) -> None:
        """An error ended the session: drop what waits for Redis (it stays local)."""
