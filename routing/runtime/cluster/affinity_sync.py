"""Prompt-cache pins shared by every process over Redis, off the request path (docs/deployments.md#affinity).

With REDIS_URL set, each serving process runs one background task (`AffinitySync.run`, started by
gateway_project.process) around its picker's `Pins` (routing.core.affinity):

- **Load.** On connecting, the pins still alive in Redis (one key per pin, `PREFIX` + cluster +
  model + conversation, expiring with the pin) are merged into the process's map: a restarted
  process, or a new one, knows every conversation's deployment before it serves it.
- **Write.** Every `FLUSH_S` the pins the request path queued (`Pins.outbox`: new pins, re-pins,
  and pins in use whose shared copy is half gone) are written with their TTL left and published
  on the cluster's channel, in one pipeline. The request path only queues; it never waits for Redis.
- **Merge.** What the other processes publish is merged into this process's map (a pin already
  here and newer is kept).

While Redis is unreachable each process pins on its own (`switchboard_degraded{component="redis"}`);
the task reconnects with backoff and loads again. Times on the wire are durations left, never
clock readings: processes share no monotonic clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from routing.core.affinity import Pins
from routing.core.breaker import BreakerKey
from routing.runtime.cluster import redis_session

log = logging.getLogger("switchboard.affinity")

PREFIX = "switchboard:affinity:"  # + cluster + ":" + JSON [model, conversation]: the pin, PX = its life left
CHANNEL_PREFIX = "switchboard:affinity-pins:"  # + the Redis db index (pub/sub ignores the db) + ":" + cluster
FLUSH_S = 0.05  # queued pins are shared this often
SCAN_COUNT = 500


def pin_name(cluster: str, model: str, key: str) -> str:
    return f"{PREFIX}{cluster}:{orjson.dumps([model, key]).decode()}"


def encode(model: str, key: str, deployment: Any, left_s: float, ttl_s: float, origin: str) -> bytes:
    """One pin as stored and published: the deployment's breaker key, its life left and TTL, who set it."""
    return orjson.dumps({"m": model, "k": key, "d": list(deployment), "l": left_s, "t": ttl_s, "o": origin})


def decode(raw: bytes | str) -> tuple[str, str, BreakerKey, float, float, str]:
    """(model, key, deployment, life left s, ttl s, origin); ValueError says what is wrong."""
    try:
        m = orjson.loads(raw)
        out = (str(m["m"]), str(m["k"]), BreakerKey.from_wire(m["d"]), float(m["l"]), float(m["t"]), str(m["o"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an affinity pin ({exc})") from exc
    return out


class AffinitySync(redis_session.ChannelSync):
    """One process's side of the shared pins; see the module docstring. `clock` is the pins' (monotonic).

    The session, its backoff and the outage's log line and gauge are `redis_session.ChannelSync`'s;
    what is this part's own is the load at connect, the reader's merge and the writer's flush."""

    name = "affinity sync"
    part = "affinity"
    alone = "affinity pins are per process"
    shared = "affinity pins"
    log = log

    def __init__(
        self,
        pins: Pins,
        origin: str,
        redis_url: str,
        timeout_s: float = 1.0,
        cluster: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(redis_url, redis_session.channel_name(CHANNEL_PREFIX, redis_url, cluster), timeout_s, clock)
        self.pins = pins
        self.origin = origin
        self.cluster = cluster
        self.loaded = 0  # pins merged at the last load
        self.written = 0
        self.merged = 0

    async def _ready(self, client: Any) -> None:
        """Count as connected only once the pins alive in Redis are merged here."""
        await self.load(client)
        log.info("affinity pins: %d loaded from Redis", self.loaded)

    async def load(self, client: Any) -> int:
        """Merge every pin alive in Redis for this cluster; the number merged."""
        match = f"{PREFIX}{self.cluster}:*"
        count = 0
        cursor = 0
        while True:
            async with asyncio.timeout(self.timeout_s):
                cursor, names = await client.scan(cursor, match=match, count=SCAN_COUNT)
            if names:
                async with asyncio.timeout(self.timeout_s):
                    pipe = client.pipeline(transaction=False)
                    for name in names:
                        pipe.get(name)
                        pipe.pttl(name)
                    values = await pipe.execute()
                for raw, left_ms in zip(values[::2], values[1::2], strict=True):
                    if raw is not None and left_ms and left_ms > 0 and self._merge(raw, left_ms / 1000.0):
                        count += 1
            if not cursor:
                break
        self.loaded = count
        return count

    def _merge(self, raw: bytes, left_s: float | None = None) -> bool:
        """Merge one stored (`left_s` from its PTTL) or published pin; False for garbage and own messages."""
        try:
            model, key, deployment, left, ttl, origin = decode(raw)
        except ValueError as exc:
            log.warning("ignoring an affinity pin: %s", exc)
            return False
        if left_s is None and origin == self.origin:
            return False
        self.pins.merge(model, key, deployment, self.clock() + (left if left_s is None else left_s), ttl)
        return True

    async def _read(self, pubsub: Any) -> None:
        while True:
            redis_session.stop_if_cancelled()  # a redis-py call can swallow the task's cancellation
            message = await pubsub.get_message(timeout=1.0)
            if message is None or message.get("type") != "message":
                continue
            if self._merge(message["data"]):
                self.merged += 1

    async def _write(self, client: Any) -> None:
        while True:
            redis_session.stop_if_cancelled()
            await asyncio.sleep(FLUSH_S)
            out = self.pins.take_outbox()
            if not out:
                continue
            now = self.clock()
            pipe = client.pipeline(transaction=False)
            for (model, key), (deployment, expires, ttl) in out.items():
                left = expires - now
                if left <= 0:
                    continue
                raw = encode(model, key, deployment, left, ttl, self.origin)
                pipe.set(pin_name(self.cluster, model, key), raw, px=max(int(left * 1000), 1))
                pipe.publish(self.channel, raw)
            async with asyncio.timeout(self.timeout_s):
                await pipe.execute()
            self.written += len(out)

    def _on_down(self) -> None:
        self.pins.take_outbox()  # what could not be shared stays local; the next pins go out on reconnect
