"""Pacing: a bounded number of requests start their work per event-loop iteration (docs/performance.md#pacing).

Both servers start one task per request, and a task that needs no upstream (an open
breaker's 503, a 429 from the caller's limits, a cache hit) runs from its first
line to its answer in one step. When hundreds of requests arrive at once, one pass
of the loop then serves all of them before it polls the sockets again, and a
`/health` probe (or any other ready socket) waits for the whole burst: 100–200 ms
in the 500-request 429 storm. The pacer lets `per_tick` requests through per pass;
the others wait, in arrival order, for the following passes, so the loop polls its
sockets every `per_tick` requests. Below that rate (every steady load the benchmark
drives, up to 128 clients) it costs one comparison and one `call_soon` per pass.

While requests wait (a burst), the cyclic garbage collector is paused: a burst keeps
tens of thousands of objects alive, and a collection that scans them all stopped the
loop for 30–80 ms in the storm while freeing almost nothing. It runs again once the
backlog is gone and fewer than `per_tick` requests are in flight, or after
`max_gc_pause_s` (then not paused again until the load has dropped that far: sustained
overload must not grow memory without bound).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable


class Pacer:
    """At most `per_tick` requests admitted per loop iteration; the rest wait FIFO for the next ones."""

    __slots__ = (
        "per_tick",
        "max_gc_pause_s",
        "_in_flight",
        "_clock",
        "_used",
        "_waiters",
        "_scheduled",
        "_gc_paused_at",
        "_gc_blocked",
        "_gc_watch",
        "_loop",
    )

    def __init__(
        self,
        per_tick: int,
        in_flight: Callable[[], int],
        max_gc_pause_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_tick = per_tick
        self.max_gc_pause_s = max_gc_pause_s
        self._in_flight = in_flight  # requests being served now (the dashboard's tally)
        self._clock = clock
        self._used = 0  # requests admitted in the current iteration
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._scheduled = False  # a _tick is queued for the next iteration
        self._gc_paused_at: float | None = None  # when this pacer paused the GC (a burst began)
        self._gc_blocked = False  # paused for max_gc_pause_s already: not again until the load drops
        self._gc_watch: asyncio.TimerHandle | None = None  # checks, while paused or blocked, whether it is calm
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its callbacks are queued on

    def admit_now(self) -> bool:
        """True when the request may go on in this iteration (the common case); else await `wait()`."""
        if self._loop is not asyncio.get_running_loop():
            self._rebind()
        if self._used < self.per_tick and not self._waiters:
            self._used += 1
            if not self._scheduled:  # `_schedule`, inline: the first request of each iteration
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._tick)
            return True
        return False

    async def wait(self) -> None:
        """Wait for this request's turn in a later iteration (arrival order)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._gc_paused_at is None and not self._gc_blocked and gc.isenabled():
            gc.disable()
            self._gc_paused_at = self._clock()
            self._watch_gc()
        if not self._scheduled:
            self._schedule()
        try:
            await fut
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _schedule(self) -> None:
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _rebind(self) -> None:
        """Another loop runs now (one per test; a server has one): what was queued on the old one never runs."""
        self._loop = asyncio.get_running_loop()
        self._used = 0
        self._waiters.clear()
        self._scheduled = False
        self._gc_watch = None
        self._gc_blocked = False
        if self._gc_paused_at is not None:
            self._gc_paused_at = None
            gc.enable()

    def _tick(self) -> None:
        """A new iteration: admit the next `per_tick` waiters, and count again."""
        self._scheduled = False
        used = 0
        waiters = self._waiters
        while waiters and used < self.per_tick:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                used += 1
        self._used = used
        if used or waiters:
            self._schedule()

    GC_CHECK_S = 0.005

    def _watch_gc(self) -> None:
        if self._gc_watch is None:
            self._gc_watch = asyncio.get_running_loop().call_later(self.GC_CHECK_S, self._check_gc)

    def _check_gc(self) -> None:
        """While the GC is paused (or blocked from pausing), every few ms: is the burst over?"""
        self._gc_watch = None
        calm = not self._waiters and self._in_flight() < self.per_tick
        if self._gc_paused_at is not None:
            if calm:
                self._gc_paused_at = None
                gc.enable()
            elif self._clock() - self._gc_paused_at > self.max_gc_pause_s:
                self._gc_paused_at = None
                self._gc_blocked = True
                gc.enable()
        elif calm:
            self._gc_blocked = False
        if self._gc_paused_at is not None or self._gc_blocked:
            self._watch_gc()

    @property
    def gc_paused(self) -> bool:
        return self._gc_paused_at is not None
