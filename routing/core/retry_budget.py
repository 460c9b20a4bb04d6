"""Retry budgets per link (docs/resilience.md#r3), in the manner of Finagle's RetryBudget.

Over a sliding window of 10 one-second buckets, a link may retry while
    retries < ratio * requests + min_per_s * 10
so light traffic always gets its retries (the floor) and a storm cannot multiply
upstream load by more than about (1 + ratio). O(1) per call, clock injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable

WINDOW_S = 10


class _Window:
    __slots__ = ("second", "requests", "retries", "req_total", "retry_total")

    def __init__(self, second: int) -> None:
        self.second = second  # the whole second the newest bucket stands for
        self.requests = [0] * WINDOW_S
        self.retries = [0] * WINDOW_S
        self.req_total = 0
        self.retry_total = 0

    def advance(self, second: int) -> None:
        gap = second - self.second
        if gap <= 0:
            return
        if gap >= WINDOW_S:
            for i in range(WINDOW_S):
                self.requests[i] = 0
                self.retries[i] = 0
            self.req_total = 0
            self.retry_total = 0
        else:
            for s in range(self.second + 1, second + 1):
                i = s % WINDOW_S
                self.req_total -= self.requests[i]
                self.retry_total -= self.retries[i]
                self.requests[i] = 0
                self.retries[i] = 0
        self.second = second


class RetryBudgets:
    """One sliding window per link key."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[Hashable, _Window] = {}

    def _window(self, key: Hashable) -> tuple[_Window, int]:
        second = int(self._clock())
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = _Window(second)
        elif second > w.second:  # a new second (`advance` is a no-op within one: not called then)
            w.advance(second)
        return w, second % WINDOW_S

    def record_request(self, key: Hashable) -> None:
        """A logical request reached this link (retries are not requests)."""
        w, i = self._window(key)
        w.requests[i] += 1
        w.req_total += 1

    def try_spend_retry(self, key: Hashable, ratio: float, min_per_s: float) -> bool:
        """Spend one retry if the budget allows it; False means: give up on this link."""
        w, i = self._window(key)
        if w.retry_total >= ratio * w.req_total + min_per_s * WINDOW_S:
            return False
        w.retries[i] += 1
        w.retry_total += 1
        return True

    def stats(self, key: Hashable) -> tuple[int, int]:
        """(requests, retries) in the current window."""
        w = self._windows.get(key)
        if w is None:
            return 0, 0
        w.advance(int(self._clock()))
        return w.req_total, w.retry_total

    def retain(self, keys: Iterable[Hashable]) -> None:
        keep = keys if isinstance(keys, (set, frozenset)) else set(keys)
        for key in [k for k in self._windows if k not in keep]:
            del self._windows[key]

    def clear(self) -> None:
        self._windows.clear()
