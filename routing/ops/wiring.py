"""The composition root: the one place that builds a serving process's parts and connects them.

Nothing is built at import time. `process()` builds the executor with its
observer and installs every listener (breaker transitions into metrics and the
dashboard, snapshot swaps into the breaker registry, reload counts into
metrics, probe results into the dashboard); `start()` does that and, once a
loop runs, starts the background tasks. The request path calls `start()` once
per request: a single check after the first call. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from providers import health
from providers.transport import transport
from routing.config import live
from routing.core import balance
from routing.core.breaker import registry as breakers
from routing.core.executor import Executor
from routing.core.parking import parking
from routing.core.retry_budget import budgets
from routing.ops import background, breaker_sync, controls, metrics, overload, shared_limits, tracing, usage
from routing.ops.dashboard import counters, feed, processes, state
from routing.ops.outage import Outage
from routing.ops.response_cache import Coalescer, Store, build_store
from routing.plan.budgets import Budgets
from routing.plan.chain import breaker_keys
from routing.plan.limits import Limiter

log = logging.getLogger("switchboard")


@dataclass
class Process:
    """What one serving process is made of."""

    executor: Executor
    limiter: Limiter = field(default_factory=Limiter)  # rate-limit buckets, per process (docs/limits.md)
    budgets: Budgets = field(default_factory=Budgets)  # spend budgets (docs/limits.md#budgets)
    cache: Store | None = None  # the response cache's store (docs/cache.md): Redis or this process's LRU
    coalescer: Coalescer = field(default_factory=Coalescer)  # identical cacheable requests in flight
    tasks: list[asyncio.Task] = field(default_factory=list)
    started: bool = False


_process: Process | None = None
_background = True


def process() -> Process:
    """The process's parts, built and connected on first use."""
    global _process
    if _process is None:
        _process = _build()
    return _process


def _build() -> Process:
    executor = Executor(breakers, budgets, observer=_Observer())
    live.swap_listeners.append(overload.apply)  # adaptive limits, queues, hedging: each reload (docs/overload.md)
    overload.apply(live.current())
    feed.install()  # breaker transitions into the dashboard feed and the circuit metric
    parking.observe = metrics.parking_changed  # quota parks and refused credentials as gauges
    metrics.request_listeners.append(counters.note_request)
    live.swap_listeners.append(_retain_breakers)
    live.reload_listeners.append(metrics.config_reloaded)
    live.degraded_listeners.append(metrics.set_degraded_gauge)
    for component, flag in live.degraded.items():  # booted degraded before the wiring (last good file)
        metrics.set_degraded_gauge(component, flag)
    health.change_listeners.append(feed.note_probe)
    # The snapshot may already be in place (booted before the wiring): keep its breakers.
    _retain_breakers(live.current())
    cache = build_store(on_degraded=lambda down: live.set_degraded("redis", down, "cache"))
    if cache.name == "redis":
        live.set_degraded("redis", False, "cache")  # the series exists from the start
    tracing.configure()  # only with an OTLP endpoint configured (docs/tracing.md)
    return Process(executor, cache=cache)


class _Observer(metrics.MetricsObserver):
    """The executor's observer: attempts into metrics; fallbacks into metrics and the dashboard feed."""

    __slots__ = ()

    def fallback(self, from_model: str, to_model: str, reason: str) -> None:
        super().fallback(from_model, to_model, reason)
        feed.note_fallback(from_model, to_model, reason)


def _retain_breakers(snapshot: live.Snapshot) -> None:
    keys = breaker_keys(snapshot)
    breakers.retain(keys)
    balance.balancer.retain(keys)  # deployment figures (docs/deployments.md) follow the same keys
    breaker_sync.set_known(keys)  # transitions heard from other processes apply to these links only
    if snapshot.overrides:  # operators' stored force-open / reset (docs/scale-out.md#controls)
        try:
            feed.call_on_loop(lambda: controls.apply_persisted(snapshot.overrides, keys))
        except Exception:  # noqa: BLE001 - the snapshot is in; the next reload applies them
            log.exception("could not apply the stored breaker controls")


def disable_background() -> None:
    """Never start background tasks in this process (in-process tests drive the request path alone)."""
    global _background
    _background = False


def start() -> Process:
    """The process's parts, with its background tasks started on the running loop (once)."""
    proc = _process
    if proc is not None and proc.started:
        return proc
    proc = process()
    proc.started = True
    if _background:
        proc.budgets.loading = True  # new accounts wait for the spend loader below, even before it begins
        _close_upstreams_on_reactor_shutdown()
        for name, func in (
            ("config-listener", background.config_listener),
            ("config-poller", background.config_poller),
            ("usage-writer", usage.run_writer),
            ("breaker-controls", controls.control_listener),
            ("breaker-sync", breaker_sync.run),
            ("dashboard-broadcaster", state.run_broadcaster),
            ("health-prober", health.run_prober),
            ("metrics-refresher", metrics.run_refresher),
            ("health-results", health.results_listener),
            ("process-heartbeat", processes.run_heartbeat),
            ("budget-spend", lambda: shared_limits.run_spend_loader(proc.budgets, flush=usage.flush_now)),
        ):
            proc.tasks.append(_spawn(name, func))
        if proc.cache is not None and proc.cache.name == "redis":
            proc.tasks.append(_spawn("cache-warm-up", proc.cache.warm))
        _start_shared_limits(proc)
    return proc


def _start_shared_limits(proc: Process) -> None:
    """With REDIS_URL, limits, budgets and deployment capacity are leased from cluster buckets and counters
    (docs/limits.md#shared)."""
    from django.conf import settings

    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return
    syncer = shared_limits.Syncer(
        proc.budgets,
        proc.limiter,
        url,
        interval_s=settings.SWITCHBOARD_LIMITS_SYNC_S,
        timeout_s=min(0.5, settings.SWITCHBOARD_SHARED_TIMEOUT_S),
        namespace=shared_limits.namespace(settings.DATABASES["default"]),
        balancer=proc.executor.balancer,  # deployments' capacity, shared too (docs/deployments.md#capacity)
        flush=usage.flush_now,  # a rebuild of the counters first writes this process's records
    )
    shared_limits.install(syncer)
    proc.tasks.append(_spawn("shared-limits", syncer.run))


RECOVERED_S = 5.0  # a restarted background task that runs this long has recovered
FIRST_DELAY_S = 0.5  # the first restart's wait; doubled per failure up to 30 s


def _recovered(outage: Outage, failures: int) -> None:
    """A restart has run RECOVERED_S: no failure since (the count is unchanged) is a recovery."""
    if outage.failures == failures:
        outage.ok()


def _spawn(name: str, func: Callable[[], Awaitable[None]]) -> asyncio.Task:
    """Run `func` for the life of the process, restarting it with a backoff when it fails: one
    log line when it starts failing (a traceback only for what is not an outage of Redis or
    the database), one when a restart has run RECOVERED_S (routing.ops.outage)."""
    outage = Outage(log, f"background task {name}", "restarting it with a backoff until it runs again")

    async def guarded() -> None:
        loop = asyncio.get_running_loop()
        delay = FIRST_DELAY_S
        while True:
            if outage.down:
                loop.call_later(RECOVERED_S, _recovered, outage, outage.failures)
            try:
                await func()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a background task must never die for good
                if not outage.down:
                    delay = FIRST_DELAY_S
                outage.failed(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    return asyncio.get_running_loop().create_task(guarded(), name=f"switchboard:{name}")


async def shutdown() -> None:
    """Stop tasks, flush usage records and close upstream pools (lifespan shutdown)."""
    if _process is not None:
        for task in _process.tasks:
            task.cancel()
    await processes.farewell()
    await asyncio.get_running_loop().run_in_executor(None, usage.shutdown)
    await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)  # flush the last spans
    await transport.aclose()


def _close_upstreams_on_reactor_shutdown() -> None:
    """daphne runs on Twisted and sends no lifespan: close the pools when its reactor stops."""
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import defer, reactor

    def close() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(transport.aclose()))

    reactor.addSystemEventTrigger("before", "shutdown", close)
