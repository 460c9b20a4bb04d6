"""Redis commands issued in one event-loop pass, sent as one pipeline (docs/cache.md#storage).

redis-py's asyncio client spends about 70 µs of CPU on each command it sends on its own
(connection checkout and release, packing, a read per reply); at 32 clients that was
most of what a Redis cache miss cost the gateway. A `Batcher` queues the commands of a
pass and sends them together: one connection, one write, the replies read in one go.
A command awaited while nothing else is on its way goes out at once, on its own (a
queue would cost a lone request two loop passes and a pipeline's overhead, ≈ 60 µs
on a Redis hit): batching starts only where there is something to share.

Each command's outcome is its own future: a reply, or the exception for that command
(a script error) or for the whole batch (Redis unreachable, the socket timing out).
A caller that stopped waiting (its own timeout) is skipped when the replies are handed
out; the command itself may still run, as with any command sent to Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Batcher:
    """Queue commands from any number of coroutines; one task per loop pass sends them as a pipeline."""

    __slots__ = ("_client", "_queue", "_tasks", "_busy")

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client  # the redis.asyncio client of the running loop
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._busy = 0  # commands sent on their own and batches, on their way

    async def run(self, *args: Any) -> Any:
        """The reply to `args`: sent at once when nothing else is on its way, else with this pass's batch."""
        if self._busy or self._queue:
            return await self.call(*args)
        self._busy += 1
        try:
            return await self._client().execute_command(*args)
        finally:
            self._busy -= 1

    def call(self, *args: Any) -> asyncio.Future[Any]:
        """Send `args` (a Redis command) with the others of this pass; the future holds its reply."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((args, future))
        if len(self._queue) == 1:  # the first of this pass: the task runs after the pass, taking all
            task = loop.create_task(self._send())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return future

    async def _send(self) -> None:
        batch, self._queue = self._queue, []
        batch = [(args, future) for args, future in batch if not future.done()]  # callers that gave up
        if not batch:
            return
        self._busy += 1
        try:
            pipe = self._client().pipeline(transaction=False)
            for args, _ in batch:
                pipe.execute_command(*args)
            replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # noqa: BLE001 - every command of the batch gets the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else ConnectionError(repr(exc)))
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._busy -= 1
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def drain(self) -> None:
        """Wait until every queued command has been sent and answered (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
