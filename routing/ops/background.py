"""Background work of a serving process, started on the first ASGI event.

daphne has no lifespan protocol, so the tasks start lazily the first time the
application sees any scope (one boolean check per request), and from the
lifespan startup event under servers that send one. Each task survives Redis or
database outages by logging and retrying; none of them is on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from django.conf import settings

from routing.config import live
from routing.config.reload import CONFIG_GROUP, shared_timeout_s

log = logging.getLogger("switchboard")

_started = False
_tasks: list[asyncio.Task] = []


def disable() -> None:
    """Never start background tasks in this process (in-process tests drive the request path alone)."""
    global _started
    _started = True


def ensure_started() -> None:
    """Start the process's background tasks once, on the running loop."""
    global _started
    if _started:
        return
    _started = True
    _close_upstreams_on_reactor_shutdown()
    _watch_degraded()
    _spawn("config-listener", config_listener)
    _spawn("config-poller", config_poller)
    for module, name in (
        ("routing.ops.usage", "run_writer"),
        ("routing.ops.dashboard", "control_listener"),
        ("routing.ops.dashboard", "run_broadcaster"),
        ("providers.health", "run_prober"),
    ):
        try:
            func = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            continue
        _spawn(f"{module}.{name}", func)


def _spawn(name: str, func: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        delay = 0.5
        while True:
            try:
                await func()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a background task must never die for good
                log.exception("background task %s failed; restarting in %.1fs", name, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    _tasks.append(asyncio.get_running_loop().create_task(guarded(), name=f"switchboard:{name}"))


def _watch_degraded() -> None:
    """Mirror routing.config.live's degraded components into the switchboard_degraded gauge."""
    from routing.ops.metrics import set_degraded_gauge

    if set_degraded_gauge not in live.degraded_listeners:
        live.degraded_listeners.append(set_degraded_gauge)
    for component, flag in live.degraded.items():
        set_degraded_gauge(component, flag)


async def config_listener() -> None:
    """Rebuild on every config.changed broadcast (instant; all replicas with Redis)."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    channel = await layer.new_channel()
    await asyncio.wait_for(layer.group_add(CONFIG_GROUP, channel), shared_timeout_s())
    while True:
        await layer.receive(channel)
        await live.rebuild("broadcast")


async def config_poller() -> None:
    """Safety net: compare the configuration version every SWITCHBOARD_CONFIG_POLL_S."""
    loop = asyncio.get_running_loop()
    interval = settings.SWITCHBOARD_CONFIG_POLL_S
    failures = 0
    while True:
        await asyncio.sleep(interval)
        try:
            version = await loop.run_in_executor(None, _read_version)
            failures = 0
        except Exception as exc:  # noqa: BLE001 - database down: keep serving the snapshot
            failures += 1
            if failures == 1:
                log.warning("configuration version check failed (%s); serving the last snapshot", exc)
            continue
        if live.degraded.get("database") or (version != live.current().version and version != live.rejected_version):
            await live.rebuild("version check")


def _read_version() -> int:
    from django.db import close_old_connections

    close_old_connections()
    try:
        return live.read_version()
    finally:
        close_old_connections()


async def shutdown() -> None:
    """Stop tasks, flush usage records and close upstream pools (lifespan shutdown)."""
    from providers.transport import transport
    from routing.ops import usage

    for task in _tasks:
        task.cancel()
    await asyncio.get_running_loop().run_in_executor(None, usage.shutdown)
    await transport.aclose()


def _close_upstreams_on_reactor_shutdown() -> None:
    """daphne runs on Twisted and sends no lifespan: close the pools when its reactor stops."""
    import sys

    if "twisted.internet.reactor" not in sys.modules:
        return
    from twisted.internet import defer, reactor

    from providers.transport import transport

    def close() -> defer.Deferred:
        return defer.Deferred.fromFuture(asyncio.ensure_future(transport.aclose()))

    reactor.addSystemEventTrigger("before", "shutdown", close)
