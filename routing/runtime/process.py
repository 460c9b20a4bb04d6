"""One serving process's long-lived parts, held by one object (docs/architecture.md#composition-root).

The composition root (gateway_project.process.build_process) builds a `Process` and hands
it to the gateway (`make_gateway(process)`), which passes it down the request path. Nothing
here is built at import time.

`current()` is the one accessor for code that has no request path to receive the process
from: Django views, the admin, management commands and the dashboard's background loops.
The root installs the process it built with `install()`; tests build and install their own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from routing.core.admission_queue import Gates
from routing.core.breaker import BreakerRegistry
from routing.core.budget_accounts import Budgets
from routing.core.executor import Executor
from routing.core.hedging import Hedges
from routing.core.limiter import Limiter
from routing.core.parking import Parking
from routing.core.picking import Picker
from routing.core.retry_budget import RetryBudgets
from routing.runtime.background import Drains
from routing.runtime.cache.response_cache import Coalescer, Store
from routing.runtime.cluster.idempotency import IdempotencyStore
from routing.runtime.usage.queue import UsageSink
from routing.upstream.transport import Transport


class Tally:
    """What the request path counts for the heartbeat: two integer bumps per request."""

    __slots__ = ("in_flight", "served")

    def __init__(self) -> None:
        self.in_flight = 0
        self.served = 0


@dataclass(eq=False)
class Process:
    """What one serving process is made of: every part that lives as long as the process."""

    executor: Executor  # the chain walk; holds the breakers, retry budgets, picker, gates, hedges, parking
    transport: Transport  # the upstream connection pools (docs/performance.md)
    idempotency: IdempotencyStore  # Idempotency-Key claims and answers (docs/api.md#idempotency)
    usage: UsageSink  # the usage records' queue, journal and writer (docs/usage-records.md)
    limiter: Limiter = field(default_factory=Limiter)  # rate-limit buckets, per process (docs/limits.md)
    budgets: Budgets = field(default_factory=Budgets)  # spend budgets (docs/limits.md#budgets)
    cache: Store | None = None  # the response cache's store (docs/cache.md): Redis or this process's LRU
    coalescer: Coalescer = field(default_factory=Coalescer)  # identical cacheable requests in flight
    tally: Tally = field(default_factory=Tally)
    drains: Drains = field(default_factory=Drains)  # finished streams' upstream connections (docs/performance.md)
    probes: dict = field(
        default_factory=dict
    )  # provider name -> its last health probe result (docs/operations.md)  # in flight and served, for the process list
    alerts: Any = None  # a routing.runtime.observe.alerts.Alerts: events handed to the alerts task (docs/alerts.md)
    # (SWITCHBOARD_BODY_TIMEOUT_S, SWITCHBOARD_BODY_MIN_BYTES), read once by the composition root: the window a
    # body in several messages must keep up with (docs/security.md#server-edge); (0, 1): none
    body_window: tuple[float, int] = (0.0, 1)
    # The parts below are built by the composition root (gateway_project.process.build_process). Their
    # modules find the process through `installed()`: this one does not import them (no cycle), so they
    # are typed by name in the comments.
    overload: Any = None  # routing.runtime.overload.Overload: gates' settings, the request's ticket (docs/overload.md)
    # routing.runtime.observe.feed.Feed: the dashboard's events and the serving loop (docs/dashboard.md)
    feed: Any = None
    # routing.runtime.observe.counters.ModelCounters: the dashboard's per-model rates and sparklines
    counters: Any = None
    # routing.runtime.cluster.process_list.Heartbeat: this process's entry in the process list
    heartbeat: Any = None
    # routing.runtime.cluster.shared_spend.SpendLoader: budgets' spend from the records (docs/limits.md#durable)
    spend: Any = None
    # routing.runtime.cluster.shared_leases.Syncer, with REDIS_URL: cluster leases (docs/limits.md#shared)
    syncer: Any = None
    # routing.runtime.cluster.breaker_sync.BreakerSync, with REDIS_URL: shared breaker transitions
    breaker_sync: Any = None
    breaker_keys: set | None = None  # the breaker keys of the snapshot now serving
    # routing.runtime.observe.tracing.Tracing, with an OTLP endpoint: spans, GenAI metrics (docs/tracing.md)
    tracing: Any = None
    background: bool = True  # start the background tasks (in-process tests drive the request path alone)
    tasks: list[asyncio.Task] = field(default_factory=list)
    started: bool = False

    @property
    def breakers(self) -> BreakerRegistry:
        return self.executor.breakers

    @property
    def retry_budgets(self) -> RetryBudgets:
        return self.executor.budgets

    @property
    def picker(self) -> Picker:
        return self.executor.picker

    @property
    def gates(self) -> Gates:
        return self.executor.gates

    @property
    def hedges(self) -> Hedges:
        return self.executor.hedges

    @property
    def parking(self) -> Parking:
        return self.executor.parking


_installed: Process | None = None


def install(process: Process | None) -> Process | None:
    """Make `process` the one `current()` returns; gives back the one it replaces."""
    global _installed
    previous, _installed = _installed, process
    return previous


def installed() -> Process | None:
    """The current process, or None when none is installed (code that also runs without one: a breaker
    listener of a unit test, a management command)."""
    return _installed


def current() -> Process:
    """The process the root built and installed (Django views, admin, commands, background loops)."""
    if _installed is None:
        raise RuntimeError(
            "no serving process is installed: gateway_project.process.build_process() builds one "
            "(gateway_project.asgi does at boot; tests use the `process` fixture)"
        )
    return _installed
