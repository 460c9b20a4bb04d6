"""The background work of a serving process: the reload listener, the version poll, and the
upstream connections drained after a stream's answer is finished.

gateway_project.process starts the two configuration tasks (lazily on the first ASGI event,
since daphne has no lifespan protocol, or from the lifespan startup event). Each survives
Redis or database outages by logging and retrying; neither is on the request path. The
drains (`Drains`, the process's `drains`) are started by the request path once its client
has the last byte, and never waited for by it (docs/performance.md#drain-after).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from django.conf import settings

from routing.config import live
from routing.config.reload import CONFIG_GROUP, shared_timeout_s
from routing.runtime.observe.outage import Outage
from routing.runtime.usage.writer import DaemonWorker

log = logging.getLogger("switchboard")
DRAIN_WAIT_S = 0.05  # how long a finished stream's upstream transfer may take to end and keep its connection
DRAIN_LIMIT = 64  # drains pending at once; beyond it a connection is closed (each one holds a connection)


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

    interval = settings.SWITCHBOARD_CONFIG_POLL_S
    worker = DaemonWorker("switchboard-config-poll")  # one thread, so one database connection kept
    outage = Outage(log, "configuration version check", "serving the last snapshot")
    while True:
        await asyncio.sleep(interval)
        try:
            version = await asyncio.wrap_future(worker.submit(_read_version))
            outage.ok()
        except Exception as exc:  # noqa: BLE001 - database down: keep serving the snapshot
            outage.failed(exc)
            continue
        if live.degraded.get("database") or (version != live.current().version and version != live.rejected_version):
            await live.rebuild("version check")


def _read_version() -> int:
    """The stored version, on the poll's own thread, which keeps its database connection between
    polls: opening one twice a second was measurable CPU beside the serving loop
    (docs/performance.md#profile). A failed read closes it, so the next poll reconnects."""
    from django.db import connection

    try:
        return live.read_version()
    except Exception:
        connection.close()
        raise


class Drainable(Protocol):
    """What a drain is given: an upstream response (routing.upstream.transport.UpstreamResponse)."""

    async def close(self, drain_s: float = 0.0) -> None: ...


class Drains:
    """Upstream responses read to their transfer's end in the background, so their connections stay pooled.

    A translated stream ends at its protocol's last event (Anthropic's `message_stop`, the Responses
    `response.completed`), often a few milliseconds before the upstream's transfer ends; closing it then
    throws the connection away and the next call pays a new connect and handshake. Waiting for that end
    on the request path made clients that leave on the last event see their whole answer recorded as a
    499, so the request path hands the response over here once the client has the last byte (`hand_off`)
    and moves on. Bounded: at most `limit` pending (beyond that the caller closes at once), each waiting
    at most `wait_s`; the process's shutdown cancels the rest (`aclose`), which closes their connections.
    """

    __slots__ = ("limit", "wait_s", "_pending")

    def __init__(self, limit: int = DRAIN_LIMIT, wait_s: float = DRAIN_WAIT_S) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self._pending: set[asyncio.Task] = set()

    @property
    def pending(self) -> int:
        """Drains started and not yet ended."""
        return len(self._pending)

    def hand_off(self, response: Drainable) -> bool:
        """Start draining `response`; False when it was not taken (full, or no running loop): close it yourself."""
        pending = self._pending
        if len(pending) >= self.limit:
            return False
        try:
            task = asyncio.get_running_loop().create_task(response.close(self.wait_s))
        except RuntimeError:
            return False
        pending.add(task)
        task.add_done_callback(self._finished)
        return True

    def _finished(self, task: asyncio.Task) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:  # retrieved, so asyncio does not log it
            log.debug("draining an upstream connection failed", exc_info=task.exception())

    async def aclose(self) -> None:
        """Cancel the pending drains (process shutdown): each closes its connection on the way out."""
        pending = list(self._pending)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
