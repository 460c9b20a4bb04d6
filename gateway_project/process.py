"""The composition root: the one place that builds a serving process's parts and connects them.

`build_process(settings)` builds every long-lived part (breakers, retry budgets, the
deployment picker, gates, hedges, parking, the upstream transport, the idempotency store,
the usage sink, limiter, budgets, response cache, coalescer, tally, overload settings,
dashboard feed and counters, heartbeat, spend loader; with REDIS_URL the lease syncer and
breaker sync, with an OTLP endpoint the tracer: each a field of the `Process`, never a
module variable), connects the listeners (breaker transitions into metrics and the
dashboard, snapshot swaps into the breaker registry, reload counts into metrics, probe
results into the dashboard) and installs the process as
`routing.runtime.process.current()`. `make_gateway(process)` returns the ASGI callable of
/v1/* and /health*; its first event starts the background tasks (`start`), a single check
after that. Nothing is built at import time.
See docs/architecture.md#composition-root.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings as django_settings

from routing.config import live
from routing.config.reload import shared_timeout_s
from routing.core.admission_queue import Gates
from routing.core.breaker import BreakerRegistry
from routing.core.executor import Executor
from routing.core.hedging import Hedges
from routing.core.parking import Parking
from routing.core.picking import Picker
from routing.core.retry_budget import RetryBudgets
from routing.gateway.app import serve
from routing.gateway.pacing import Pacer
from routing.gateway.wire import Receive, Scope, Send
from routing.ops import controls
from routing.ops.dashboard import state
from routing.plan.chain import breaker_keys
from routing.runtime import background, overload, usage
from routing.runtime.cache.response_cache import build_store
from routing.runtime.cluster import affinity_sync, breaker_sync, process_list, shared_limits
from routing.runtime.cluster.idempotency import IdempotencyStore
from routing.runtime.cluster.shared_spend import SpendLoader
from routing.runtime.observe import alerts, counters, feed, health, metrics, tracing
from routing.runtime.observe.outage import Outage
from routing.runtime.process import Process, current, install, installed
from routing.runtime.usage.queue import UsageSink
from routing.upstream.blocking import BlockingPool, BlockingPools
from routing.upstream.transport import Transport

log = logging.getLogger("switchboard")
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def build_process(settings: Any = django_settings, *, background: bool = True) -> Process:
    """Build one serving process's parts, connect them, and install it as the current process.

    `background=False`: never start background tasks (in-process tests drive the request path alone)."""
    own_feed = feed.Feed()
    executor = Executor(
        BreakerRegistry(),
        RetryBudgets(),
        observer=_Observer(own_feed),  # fallbacks into this process's feed, never the installed one's
        picker=Picker(),
        gates=Gates(),
        hedges=Hedges(),
        parking=Parking(),
    )
    transport = Transport(blocking=blocking_pools(settings))
    process = Process(
        executor,
        transport,
        IdempotencyStore(),
        UsageSink(),
        overload=overload.Overload(executor.gates, executor.hedges),  # adaptive limits and queues (docs/overload.md)
        feed=own_feed,
        counters=counters.ModelCounters(),
        heartbeat=process_list.Heartbeat(),
        spend=SpendLoader(),
        body_window=(settings.SWITCHBOARD_BODY_TIMEOUT_S, settings.SWITCHBOARD_BODY_MIN_BYTES),
        background=background,
    )
    install(process)
    _wire_alerts(process)
    _listen(live.swap_listeners, overload.apply)  # each reload applies its overload settings to the current process
    process.overload.apply(live.current())
    process.feed.watch(process.breakers)  # breaker transitions into the dashboard feed and the circuit metric
    if process.parking.observe is None:
        process.parking.observe = metrics.parking_changed  # quota parks and refused credentials as gauges
    process.picker.pins.on_repin = metrics.affinity_repin  # conversations moved off their deployment
    metrics.watch_backlog(process.usage.backlog)
    # the request path counts each request into its own process's counters (accounting.observe)
    _listen(live.swap_listeners, _retain_breakers)
    _listen(live.reload_listeners, metrics.config_reloaded)
    _listen(live.degraded_listeners, metrics.set_degraded_gauge)
    for component, flag in live.degraded.items():  # booted degraded before the wiring (last good file)
        metrics.set_degraded_gauge(component, flag)
    _listen(health.change_listeners, feed.note_probe)
    # The snapshot may already be in place (booted before the wiring): keep its breakers.
    _retain_breakers(live.current())
    process.cache = build_store(on_degraded=lambda down: live.set_degraded("redis", down, "cache"))
    if process.cache.name == "redis":
        live.set_degraded("redis", False, "cache")  # the series exists from the start
    tracing.configure()  # only with an OTLP endpoint configured (docs/tracing.md)
    return process


def reinstall(process: Process) -> None:
    """Make a process built earlier the current one again: every part is the process's own, so this is
    `install` plus the overload settings of the snapshot serving now (a test may have swapped it) and the
    usage backlog gauge, which reads one process's sink (the one built last, a disposed one, otherwise)."""
    install(process)
    process.overload.apply(live.current())
    metrics.watch_backlog(process.usage.backlog)


def dispose(process: Process) -> None:
    """Take down a process built without background tasks (a test's own): drop its queued usage records
    (they belong to no database) and stop its tracing; nothing of it stays reachable once another is installed."""
    process.usage.discard()
    tracing.shutdown(process)
    process.syncer = None
    process.breaker_sync = None


def _wire_alerts(process: Process) -> None:
    """The alerts hand-off (docs/alerts.md): breaker transitions, quota parks, shedding and degraded
    components reach `process.alerts`, which drops them at once when no rule wants them."""
    hub = process.alerts = alerts.Alerts()
    process.breakers.add_listener(hub.breaker_changed)

    def parked(key: Any, name: str, value: int) -> None:
        metrics.parking_changed(key, name, value)
        hub.parking_changed(key, name, value)

    def shed(reason: str, priority: str) -> None:
        overload.count_shed(reason, priority)
        hub.shed(reason, priority)

    process.parking.observe = parked
    process.gates.on_shed = shed
    _listen(live.degraded_listeners, _degraded_alert)


def _degraded_alert(component: str, flag: bool) -> None:
    """A component degraded or back: to the current process's alerts hub (one listener for every process
    built in this interpreter, so a second one, in tests, neither doubles nor keeps the first's)."""
    process = installed()
    if process is not None and process.alerts is not None:
        process.alerts.degraded(component, flag)


def blocking_pools(settings: Any = django_settings) -> BlockingPools:
    """The process's pools for upstreams' blocking calls, sized and timed by the settings (docs/security.md#blocking):
    none of them can take a thread of the loop's default pool, which the reload, spend reads and spill use."""
    return BlockingPools(
        BlockingPool(
            "token-exchange", settings.SWITCHBOARD_TOKEN_EXCHANGE_THREADS, settings.SWITCHBOARD_TOKEN_EXCHANGE_TIMEOUT_S
        ),
        BlockingPool("resolve", settings.SWITCHBOARD_RESOLVE_THREADS, settings.SWITCHBOARD_RESOLVE_TIMEOUT_S),
    )


def make_gateway(process: Process, settings: Any = django_settings, pacer: Pacer | None = None) -> ASGIApp:
    """The ASGI callable of /v1/* and /health*: the process's first event starts its background tasks."""
    if pacer is None:
        pacer = Pacer(settings.SWITCHBOARD_REQUESTS_PER_TICK, lambda: process.tally.in_flight)

    def gateway(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain function returning serve's coroutine: no second coroutine frame per request.
        if not process.started:
            start(process)
        return serve(process, pacer, scope, receive, send)

    return gateway


def make_lifespan(process: Process) -> ASGIApp:
    """Lifespan events for servers that send them (uvicorn, granian): start and shut down the process."""

    async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                start(process)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await shutdown(process)
                await send({"type": "lifespan.shutdown.complete"})
                return

    return lifespan


def _listen(listeners: list, fn: Callable[..., Any]) -> None:
    """Add `fn` once: a second process built in one interpreter (tests) must not double the calls."""
    if fn not in listeners:
        listeners.append(fn)


class _Observer(metrics.MetricsObserver):
    """The executor's observer: attempts into metrics; fallbacks into metrics and its process's dashboard feed."""

    __slots__ = ("feed",)

    def __init__(self, own_feed: feed.Feed) -> None:
        self.feed = own_feed

    def fallback(self, from_model: str, to_model: str, reason: str) -> None:
        super().fallback(from_model, to_model, reason)
        self.feed.emit("fallback", from_model=from_model, to_model=to_model, reason=reason)


def _retain_breakers(snapshot: live.Snapshot) -> None:
    """A new snapshot: the current process takes its breaker settings and keeps the breakers and deployment
    figures of surviving links."""
    process = current()
    keys = breaker_keys(snapshot)
    process.breakers.configure(snapshot.resilience)  # threshold, cooldown: the registry's, per snapshot
    process.breakers.retain(keys)
    process.picker.retain(keys)  # deployment figures (docs/deployments.md) follow the same keys
    breaker_sync.set_known(process, keys)  # transitions heard from other processes apply to these links only
    if snapshot.overrides:  # operators' stored force-open / reset (docs/scale-out.md#controls)
        try:
            feed.call_on_loop(lambda: controls.apply_persisted(snapshot.overrides, keys))
        except Exception:  # noqa: BLE001 - the snapshot is in; the next reload applies them
            log.exception("could not apply the stored breaker controls")


def start(process: Process) -> Process:
    """The process's background tasks, started once on the running loop (a single check after the first call)."""
    if process.started:
        return process
    process.started = True
    if process.background:
        process.budgets.loading = True  # new accounts wait for the spend loader below, even before it begins
        _close_upstreams_on_reactor_shutdown(process)
        sink = process.usage
        for name, func in (
            ("config-listener", background.config_listener),
            ("config-poller", background.config_poller),
            ("usage-writer", lambda: usage.run_writer(sink)),
            ("breaker-controls", controls.control_listener),
            ("breaker-sync", lambda: breaker_sync.run(process)),
            ("dashboard-broadcaster", state.run_broadcaster),
            ("health-prober", lambda: health.run_prober(process.transport.tokens)),
            ("metrics-refresher", lambda: metrics.run_refresher(process.breakers, sink.backlog)),
            ("health-results", health.results_listener),
            ("process-heartbeat", lambda: process.heartbeat.run(process.tally, process.breakers)),
            ("budget-spend", lambda: process.spend.run(process.budgets, flush=sink.flush_now)),
            ("alerts", lambda: process.alerts.run(process.budgets)),
        ):
            process.tasks.append(_spawn(name, func))
        if process.cache is not None and process.cache.name == "redis":
            process.tasks.append(_spawn("cache-warm-up", process.cache.warm))
        _start_shared_limits(process)
        _start_affinity_sync(process)
    return process


def _start_shared_limits(process: Process, settings: Any = django_settings) -> None:
    """With REDIS_URL, limits, budgets and deployment capacity are leased from cluster buckets and counters
    (docs/limits.md#shared)."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return
    syncer = shared_limits.Syncer(
        process.budgets,
        process.limiter,
        url,
        interval_s=settings.SWITCHBOARD_LIMITS_SYNC_S,
        timeout_s=min(0.5, settings.SWITCHBOARD_SHARED_TIMEOUT_S),
        namespace=shared_limits.namespace(settings.DATABASES["default"]),
        picker=process.picker,  # deployments' capacity, shared too (docs/deployments.md#capacity)
        flush=process.usage.flush_now,  # a rebuild of the counters first writes this process's records
        gates=process.gates,  # concurrency limits split over the serving processes (docs/overload.md#processes)
    )
    process.syncer = syncer  # the request path's waiters find it here (routing.runtime.cluster.shared_waiters)
    process.tasks.append(_spawn("shared-limits", syncer.run))


def _start_affinity_sync(process: Process, settings: Any = django_settings) -> None:
    """With REDIS_URL, prompt-cache pins are shared by the cluster and survive a restart (docs/deployments.md#affinity)."""
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return
    sync = affinity_sync.AffinitySync(
        process.picker.pins, feed.PROCESS_ID, url, shared_timeout_s(), breaker_sync.cluster_of(settings)
    )
    process.tasks.append(_spawn("affinity-sync", sync.run))


RECOVERED_S = 5.0  # a restarted background task that runs this long has recovered
FIRST_DELAY_S = 0.5  # the first restart's wait; doubled per failure up to 30 s


def _recovered(outage: Outage, failures: int) -> None:
    """A restart has run RECOVERED_S: no failure since (the count is unchanged) is a recovery."""
    if outage.failures == failures:
        outage.ok()


def _spawn(name: str, func: Callable[[], Awaitable[None]]) -> asyncio.Task:
    """Run `func` for the life of the process, restarting it with a backoff when it fails: one
    log line when it starts failing (a traceback only for what is not an outage of Redis or
    the database), one when a restart has run RECOVERED_S (routing.runtime.observe.outage)."""
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


async def shutdown(process: Process) -> None:
    """Stop tasks, flush usage records and close upstream pools (lifespan shutdown)."""
    for task in process.tasks:
        task.cancel()
    await process.heartbeat.farewell()
    if process.alerts is not None:
        await process.alerts.close()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, process.usage.shutdown)
    await loop.run_in_executor(None, tracing.shutdown, process)  # flush the last spans
    await process.drains.aclose()  # streams' connections still draining: closed
    await process.transport.aclose()
    process.transport.blocking.shutdown()


def _close_upstreams_on_reactor_shutdown(process: Process) -> None:
    """daphne runs on Twisted and sends no lifespan: close the pools when its reactor stops."""
    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import defer, reactor  # reason: importing the reactor installs it; only under daphne

    async def close_all() -> None:
        await process.drains.aclose()
        await process.transport.aclose()

    def close() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(close_all()))

    reactor.addSystemEventTrigger("before", "shutdown", close)
