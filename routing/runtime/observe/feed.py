"""The dashboard's event feed and its fan-out to pages in every process.

Breaker transitions, fallbacks, probe results and operator controls become events:
kept in a bounded feed (sent whole with each state) and sent in small batches (one
channel-layer message per ~50 ms at most) to the group DASHBOARD_GROUP. Each message
carries PROCESS_ID, so with the Redis layer a page merges the processes it hears from.

The feed is the process's (`Process.feed`, built by the composition root); the module's
functions reach the installed process's and drop events when none is installed. It also
remembers the serving loop (`install`): breakers are owned by the loop's thread, and
Django's sync views read them through `call_on_loop`.
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
from routing.runtime.observe import metrics
from routing.runtime.process import installed

log = logging.getLogger("switchboard.dashboard")

DASHBOARD_GROUP = "switchboard.dashboard"
CONTROL_GROUP = "switchboard.control"
PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}"
FEED_SIZE = 60
STATE_NAMES = ("closed", "open", "half_open")


class Feed:
    """One process's dashboard feed: the recent events, the batch to send, the serving loop, the viewers."""

    def __init__(self) -> None:
        self.recent: deque[dict[str, Any]] = deque(maxlen=FEED_SIZE)
        self.outbox: deque[dict[str, Any]] = deque(maxlen=200)
        self.ids = itertools.count(1)
        self.flush_loop: asyncio.AbstractEventLoop | None = None  # the loop a batched flush is due on
        self.loop: asyncio.AbstractEventLoop | None = None  # the serving loop (owner of the breakers)
        self.tasks: set[asyncio.Task] = set()
        self.viewers = 0  # websocket consumers connected to this process
        self.watched: set[int] = set()  # ids of the registries listened to

    def emit(self, kind: str, **fields: Any) -> None:
        """Add an event to the feed and send it to the dashboards soon (batched)."""
        event = {"id": f"{PROCESS_ID}#{next(self.ids)}", "kind": kind, "at": time.time(), **fields}
        self.recent.append(event)
        self.outbox.append(event)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._schedule_flush(loop)
        elif self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._schedule_flush, self.loop)

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.flush_loop is not None and not self.flush_loop.is_closed():
            return  # a flush is already due
        self.flush_loop = loop
        loop.call_later(0.05, self._start_flush)

    def _start_flush(self) -> None:
        self.flush_loop = None
        batch = []
        while self.outbox:
            batch.append(self.outbox.popleft())
        if not batch or not self.has_audience():
            return
        self._spawn(publish(DASHBOARD_GROUP, {"type": "dashboard.events", "process": PROCESS_ID, "events": batch}))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def has_audience(self) -> bool:
        """Worth publishing: a local viewer, or other processes may have some (not the in-memory layer)."""
        return self.viewers > 0 or shared_layer()

    def watch(self, breakers: BreakerRegistry) -> None:
        """Register the breaker listeners (dashboard + metrics) once per registry; remember the serving loop."""
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        if id(breakers) in self.watched:
            return
        breakers.add_listener(self.on_breaker_change)
        breakers.add_org_listener(self.on_org_breaker_change)
        metrics.install(breakers)
        self.watched.add(id(breakers))

    def on_breaker_change(self, key: tuple[str, ...], old: Any, new: Any) -> None:
        """Breaker listener: every transition goes to the feed."""
        key = BreakerKey.of(key)
        self.emit("breaker", key=key.wire(), link=key.link, old=STATE_NAMES[int(old)], new=STATE_NAMES[int(new)])

    def on_org_breaker_change(self, key: tuple[str, ...], org: str, old: Any, new: Any) -> None:
        """Org-view listener: one org's own view of a link changed (docs/resilience.md#org-views)."""
        key = BreakerKey.of(key)
        link = f"{key.link} (org {org})"
        self.emit("breaker", key=key.wire(), org=org, link=link, old=STATE_NAMES[int(old)], new=STATE_NAMES[int(new)])

    def call_on_loop(self, fn: Callable[[], Any], timeout_s: float = 2.0) -> Any:
        """Run fn on the serving loop's thread and wait for it (see the module's `call_on_loop`)."""
        loop = self.loop
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


def _feed() -> Feed | None:
    process = installed()
    return process.feed if process is not None else None


def events() -> list[dict[str, Any]]:
    """The recent events of the current process, oldest first (sent with every state)."""
    feed = _feed()
    return list(feed.recent) if feed is not None else []


def emit(kind: str, **fields: Any) -> None:
    """Add an event to the current process's feed (none installed: dropped) and send it soon (batched)."""
    feed = _feed()
    if feed is not None:
        feed.emit(kind, **fields)


def shared_layer() -> bool:
    """Whether other processes can hear this one (a channel layer other than the in-memory one)."""
    layer = layers.get_channel_layer()  # looked up per call: tests and commands swap the layer
    return layer is not None and type(layer).__name__ != "InMemoryChannelLayer"


def has_audience() -> bool:
    """Worth publishing: a local viewer, or other processes may have some (not the in-memory layer)."""
    feed = _feed()
    return feed.has_audience() if feed is not None else shared_layer()


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


def note_fallback(from_model: str, to_model: str, reason: str) -> None:
    emit("fallback", from_model=from_model, to_model=to_model, reason=reason)


def note_probe(result: Any) -> None:
    """A health probe result (routing.runtime.observe.health.ProbeResult)."""
    emit(
        "probe",
        provider=result.name,
        status=result.status,
        latency_ms=result.latency_ms,
        checked_at=result.checked_at,
        detail=result.detail,
    )


# --------------------------------------------------------------------------- the serving loop


def install(breakers: BreakerRegistry) -> None:
    """The current process's feed listens to `breakers` (once per registry) and remembers the serving loop."""
    feed = _feed()
    if feed is not None:
        feed.watch(breakers)


def call_on_loop(fn: Callable[[], Any], timeout_s: float = 2.0) -> Any:
    """Run fn on the serving loop's thread and wait for it (from a Django sync view's thread).

    Breakers are owned by the loop thread (they are lock-free); sync views under ASGI
    run in a worker thread, so they read breaker views through here. With no serving
    loop (tests, management commands) fn simply runs here.
    """
    feed = _feed()
    return feed.call_on_loop(fn, timeout_s) if feed is not None else fn()
