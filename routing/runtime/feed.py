"""The dashboard's event feed and its fan-out to pages in every process.

Breaker transitions, fallbacks, probe results and operator controls become events:
kept in a bounded feed (sent whole with each state) and sent in small batches (one
channel-layer message per ~50 ms at most) to the group DASHBOARD_GROUP. Each message
carries PROCESS_ID, so with the Redis layer a page merges the processes it hears from.

This module also remembers the serving loop (`install`): breakers are owned by the
loop's thread, and Django's sync views read them through `call_on_loop`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from channels import layers

from routing.config.reload import shared_timeout_s
from routing.core.breaker import BreakerKey, BreakerRegistry
from routing.runtime import metrics

log = logging.getLogger("switchboard.dashboard")

DASHBOARD_GROUP = "switchboard.dashboard"
CONTROL_GROUP = "switchboard.control"
PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}"
FEED_SIZE = 60
STATE_NAMES = ("closed", "open", "half_open")

_feed: deque[dict[str, Any]] = deque(maxlen=FEED_SIZE)
_outbox: deque[dict[str, Any]] = deque(maxlen=200)
_event_ids = itertools.count(1)
_flush_loop: asyncio.AbstractEventLoop | None = None  # the loop a batched flush is due on
_loop: asyncio.AbstractEventLoop | None = None  # the serving loop (owner of the breakers)
_tasks: set[asyncio.Task] = set()
viewers = 0  # websocket consumers connected to this process


def events() -> list[dict[str, Any]]:
    """The recent events, oldest first (sent with every state)."""
    return list(_feed)


def emit(kind: str, **fields: Any) -> None:
    """Add an event to the feed and send it to the dashboards soon (batched)."""
    event = {"id": f"{PROCESS_ID}#{next(_event_ids)}", "kind": kind, "at": time.time(), **fields}
    _feed.append(event)
    _outbox.append(event)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        _schedule_flush(loop)
    elif _loop is not None and not _loop.is_closed():
        _loop.call_soon_threadsafe(_schedule_flush, _loop)


def _schedule_flush(loop: asyncio.AbstractEventLoop) -> None:
    global _flush_loop
    if _flush_loop is not None and not _flush_loop.is_closed():
        return  # a flush is already due
    _flush_loop = loop
    loop.call_later(0.05, _start_flush)


def _start_flush() -> None:
    global _flush_loop
    _flush_loop = None
    batch = []
    while _outbox:
        batch.append(_outbox.popleft())
    if not batch or not has_audience():
        return
    _spawn(publish(DASHBOARD_GROUP, {"type": "dashboard.events", "process": PROCESS_ID, "events": batch}))


def _spawn(coro: Any) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def shared_layer() -> bool:
    """Whether other processes can hear this one (a channel layer other than the in-memory one)."""
    layer = layers.get_channel_layer()  # looked up per call: tests and commands swap the layer
    return layer is not None and type(layer).__name__ != "InMemoryChannelLayer"


def has_audience() -> bool:
    """Worth publishing: a local viewer, or other processes may have some (not the in-memory layer)."""
    return viewers > 0 or shared_layer()


async def publish(group: str, message: dict[str, Any]) -> None:
    """Send to a channel-layer group; a failure (Redis down) is logged at debug and dropped."""
    layer = layers.get_channel_layer()
    if layer is None:
        return
    try:
        await asyncio.wait_for(layer.group_send(group, message), shared_timeout_s())
    except Exception as exc:  # noqa: BLE001 - Redis down: the next state refresh catches up
        log.debug("dashboard publish to %s failed: %s", group, exc)


# --------------------------------------------------------------------------- what becomes an event


def on_breaker_change(key: tuple[str, ...], old: Any, new: Any) -> None:
    """Breaker listener: every transition goes to the feed."""
    key = BreakerKey.of(key)
    emit("breaker", key=key.wire(), link=key.link, old=STATE_NAMES[int(old)], new=STATE_NAMES[int(new)])


def on_org_breaker_change(key: tuple[str, ...], org: str, old: Any, new: Any) -> None:
    """Org-view listener: one org's own view of a link changed (docs/resilience.md#org-views)."""
    key = BreakerKey.of(key)
    link = f"{key.link} (org {org})"
    emit("breaker", key=key.wire(), org=org, link=link, old=STATE_NAMES[int(old)], new=STATE_NAMES[int(new)])


def note_fallback(from_model: str, to_model: str, reason: str) -> None:
    emit("fallback", from_model=from_model, to_model=to_model, reason=reason)


def note_probe(result: Any) -> None:
    """A health probe result (routing.runtime.health.ProbeResult)."""
    emit(
        "probe",
        provider=result.name,
        status=result.status,
        latency_ms=result.latency_ms,
        checked_at=result.checked_at,
        detail=result.detail,
    )


# --------------------------------------------------------------------------- the serving loop

_installed: set[int] = set()  # ids of the registries listened to


def install(breakers: BreakerRegistry) -> None:
    """Register the breaker listeners (dashboard + metrics) once per registry; remember the serving loop."""
    global _loop
    try:
        _loop = asyncio.get_running_loop()
    except RuntimeError:
        pass
    if id(breakers) in _installed:
        return
    breakers.add_listener(on_breaker_change)
    breakers.add_org_listener(on_org_breaker_change)
    metrics.install(breakers)
    _installed.add(id(breakers))


def call_on_loop(fn: Callable[[], Any], timeout_s: float = 2.0) -> Any:
    """Run fn on the serving loop's thread and wait for it (from a Django sync view's thread).

    Breakers are owned by the loop thread (they are lock-free); sync views under ASGI
    run in a worker thread, so they read breaker views through here. With no serving
    loop (tests, management commands) fn simply runs here.
    """
    loop = _loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return fn()
    try:
        if asyncio.get_running_loop() is loop:
            return fn()
    except RuntimeError:
        pass

    async def run() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout_s)
