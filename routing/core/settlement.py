"""A served link's breaker charge, decided after the executor returns (a stream's success is its clean end).

The executor charges a link's breaker once per logical request. A stream has committed when
`attempt` returns, but whether it succeeded is only known when its last frame is sent: the
Outcome then carries a `Settlement` and the caller settles it exactly once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from routing.core.breaker import BreakerRegistry


class Settlement:
    """The serving link's breaker charge, decided later (a stream's success is its clean end).

    Exactly one of `success`, `failure`, `release` takes effect; later calls do nothing.
    """

    __slots__ = ("_breakers", "_key", "_probe", "_open", "_then", "_org")

    def __init__(self, breakers: BreakerRegistry, key: Any, probe: int, org: str | None = None) -> None:
        self._breakers = breakers
        self._key = key
        self._probe = probe
        self._open = True
        self._org = org
        self._then: Callable[[], None] | None = None  # also run once settled (a deployment's in-flight count)

    def then(self, fn: Callable[[], None]) -> None:
        before = self._then
        self._then = fn if before is None else functools.partial(_both, before, fn)

    def _settled(self) -> None:
        fn = self._then
        if fn is not None:
            self._then = None
            fn()

    def success(self) -> None:
        if self._open:
            self._open = False
            self._breakers.record_success(self._key, self._probe, self._org)
            self._settled()

    def failure(self) -> None:
        """One breaker failure for the link (a committed stream that broke)."""
        if self._open:
            self._open = False
            self._breakers.record_failure(self._key, self._probe, self._org)
            self._settled()

    def release(self) -> None:
        """Neither: the outcome says nothing about the provider (client gone, our deadline)."""
        if self._open:
            self._open = False
            self._breakers.release(self._key, self._probe, self._org)
            self._settled()


def _both(first: Callable[[], None], second: Callable[[], None]) -> None:
    try:
        first()
    finally:
        second()
