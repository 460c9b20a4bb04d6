"""Blocking calls beside the request path, each kind on a small thread pool of its own (docs/security.md#blocking).

A synchronous library call (google-auth's token exchange, a name lookup) cannot be
cancelled: when the request that started it gives up, its thread runs on until the
call returns. On the event loop's default pool such threads add up, and the
configuration reload, the spend reads and the usage spill, which use that pool, wait
behind them. So each kind of upstream blocking call runs on a `BlockingPool` of a
few threads, built by the composition root (gateway_project.process) with its size
and timeout from the settings, and held by the transport:

- a call never queues: when every thread is taken, `submit` raises `PoolBusy` at once,
  so a hung upstream costs at most `threads` threads and never a queue of waiters;
- `run` waits at most `timeout_s` for the answer (TimeoutError past it); the call
  itself must carry the same timeout (its socket timeout) so its thread comes back.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

TOKEN_EXCHANGE_THREADS = 4  # concurrent token exchanges per process (one per service account at a time)
TOKEN_EXCHANGE_TIMEOUT_S = 10.0  # google-auth's own default is 120 s
RESOLVE_THREADS = 4  # concurrent upstream host-name lookups per process
RESOLVE_TIMEOUT_S = 5.0


class PoolBusy(Exception):
    """Every thread of a blocking pool is taken (by calls that have not returned yet)."""


class BlockingPool:
    """A few threads for one kind of blocking call; `running` counts the calls whose threads are busy."""

    def __init__(self, name: str, threads: int, timeout_s: float) -> None:
        self.name = name
        self.threads = max(1, int(threads))
        self.timeout_s = float(timeout_s)
        self.running = 0
        self._lock = threading.Lock()  # `running` is lowered on the worker thread
        self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=f"switchboard-{name}")

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Start `fn(*args)` on a thread of this pool; PoolBusy at once when every thread is taken."""
        with self._lock:
            if self.running >= self.threads:
                raise PoolBusy(
                    f"all {self.threads} threads of the {self.name} pool are busy with calls that have not returned"
                )
            self.running += 1
        try:
            future = self._executor.submit(fn, *args)
        except RuntimeError as exc:  # shut down
            self._done(None)
            raise PoolBusy(f"the {self.name} pool is shut down") from exc
        future.add_done_callback(self._done)
        return asyncio.wrap_future(future)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on this pool, awaited at most `timeout_s` (TimeoutError past it; its thread runs on)."""
        async with asyncio.timeout(self.timeout_s):
            return await self.submit(fn, *args)

    def _done(self, _future: Future | None) -> None:
        with self._lock:
            self.running -= 1

    def shutdown(self) -> None:
        """Refuse new calls; threads still in a call end when it returns (never waited for)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"<BlockingPool {self.name} {self.running}/{self.threads} timeout={self.timeout_s:g}s>"


class BlockingPools:
    """The serving process's blocking pools, one per kind of call (built by the composition root)."""

    def __init__(
        self,
        token_exchange: BlockingPool | None = None,
        resolve: BlockingPool | None = None,
    ) -> None:
        self.token_exchange = token_exchange or BlockingPool(
            "token-exchange", TOKEN_EXCHANGE_THREADS, TOKEN_EXCHANGE_TIMEOUT_S
        )
        self.resolve = resolve or BlockingPool("resolve", RESOLVE_THREADS, RESOLVE_TIMEOUT_S)

    def shutdown(self) -> None:
        self.token_exchange.shutdown()
        self.resolve.shutdown()
