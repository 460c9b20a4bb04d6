"""The long-lived parts one executor runs with, in one object every step of the walk reads.

The chain walk (routing.core.executor), a link's tries (routing.core.link_tries), a model's
deployments (routing.core.deployment_tries) and a hedge race (routing.core.hedge_race) are
separate modules; each takes the `ExecutorParts` and reads a part when it needs it (a test
may swap the clock or sleep on a built executor). `Executor` is this object with `run`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from routing.core.admission_queue import Gates
from routing.core.breaker import BreakerRegistry, State
from routing.core.hedging import Hedges
from routing.core.parking import Parking
from routing.core.picking import Picker
from routing.core.retry_budget import RetryBudgets
from routing.core.walk import Observer


class ExecutorParts:
    """Breakers, retry budgets, the deployment picker, overload gates, hedges, parking, and the
    injected clock, sleep and randomness (simulated time in tests)."""

    def __init__(
        self,
        breakers: BreakerRegistry | None = None,
        budgets: RetryBudgets | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        observer: Observer | None = None,
        picker: Picker | None = None,
        gates: Gates | None = None,
        hedges: Hedges | None = None,
        parking: Parking | None = None,
    ) -> None:
        # Each part defaults to a fresh one: the composition root (gateway_project.process) passes the process's.
        self.breakers = breakers if breakers is not None else BreakerRegistry()
        self.budgets = budgets if budgets is not None else RetryBudgets()
        self.picker = picker if picker is not None else Picker()
        self.gates = gates if gates is not None else Gates()
        self.hedges = hedges if hedges is not None else Hedges()
        self.parking = parking if parking is not None else Parking()
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.observer = observer

    def closed(self, key: Any) -> bool:
        """Whether the breaker of `key` is closed (affinity keeps a pin only on a closed one)."""
        return self.breakers.state(key) is State.CLOSED
