"""The configuration tasks of a serving process: the reload listener and the version poll.

gateway_project.process starts them (lazily on the first ASGI event, since daphne has no
lifespan protocol, or from the lifespan startup event). Each survives Redis or
database outages by logging and retrying; neither is on the request path.
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings

from routing.config import live
from routing.config.reload import CONFIG_GROUP, shared_timeout_s
from routing.runtime.observe.outage import Outage
from routing.runtime.usage.writer import DaemonWorker

log = logging.getLogger("switchboard")


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
