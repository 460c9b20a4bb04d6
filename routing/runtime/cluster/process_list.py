"""Live processes of the dashboard: every serving process's heartbeat, and the list built from them.

Each serving process (every worker of `serve --workers N`, every replica) runs
`run_heartbeat` in the background: once every SWITCHBOARD_HEARTBEAT_S it writes a
small record (host, pid, server, worker index, started-at, configuration version,
in-flight requests, requests served, request rate, open breakers) to

- Redis, when REDIS_URL is set: one key per process with a TTL, indexed by a sorted
  set per *cluster* (the processes sharing one configuration database), so every
  replica's dashboard lists every replica;
- the machine's shared directory under `serve --workers N` (PROMETHEUS_MULTIPROC_DIR,
  one file per worker), so without Redis a machine's dashboard lists its workers;
- otherwise only this process is listed.

A process whose heartbeat is older than STALE_BEATS intervals is *stale* (stopped,
killed, hung); after GONE_S it drops off the list. Nothing here is on the request
path: the request path only bumps two integers of the process's `Tally`. Redis trouble never
breaks anything: the heartbeat logs once, counts towards switchboard_degraded{component="redis"}
and backs off, and the list falls back to what this machine knows and says why. See docs/scale-out.md#processes.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import orjson
from django.conf import settings

from routing.config import live
from routing.config.reload import shared_timeout_s
from routing.core.breaker import BreakerKey, BreakerRegistry
from routing.runtime.cluster import cluster_scope
from routing.runtime.observe import feed
from routing.runtime.process import Tally, current

log = logging.getLogger("switchboard.dashboard")

STALE_BEATS = 5  # heartbeats missed before a process is shown as stale
GONE_S = 300.0  # a process silent for this long is dropped from the list
BACKOFF_MAX_S = 10.0  # Redis unreachable: the heartbeat retries at most this far apart
MAX_OPEN_LISTED = 20
REDIS_PREFIX = "switchboard:processes:"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

clock: Callable[[], float] = time.time  # wall time: records from several machines are compared


def interval_s() -> float:
    return float(getattr(settings, "SWITCHBOARD_HEARTBEAT_S", 1.0))


def server_name() -> str:
    """The ASGI server running this process, from what it imported (uvicorn first: the
    daphne app in INSTALLED_APPS imports daphne's modules under any server)."""
    if "uvicorn.server" in sys.modules:
        return "uvicorn"
    if "daphne.server" in sys.modules:
        return "daphne"
    return "asgi"


def shared_dir() -> Path | None:
    """The machine's directory shared by `serve --workers N` workers (None for one process)."""
    path = os.environ.get(MULTIPROC_ENV)
    return Path(path) if path and os.path.isdir(path) else None


def worker_slot(directory: Path | None, limit: int = 256) -> tuple[int, IO[str] | None]:
    """This worker's index on its machine: the lowest free slot lock in the shared directory, and the
    locked file, which its holder keeps open for the life of the process (`Heart.slot`).

    The lock is released when the process dies, so a replacement worker takes the index
    of the one it replaces. 0 for a process that is not one of `serve --workers N`."""
    if directory is None:
        return 0, None
    for i in range(limit):
        handle = open(directory / f"worker-{i}.lock", "a")  # noqa: SIM115 - held open on purpose
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return i, handle
    return limit, None


def cluster_name(database: dict[str, Any] | None = None) -> str:
    """Processes listed together: SWITCHBOARD_CLUSTER, or those sharing one configuration database."""
    db = database if database is not None else settings.DATABASES["default"]
    return cluster_scope.cluster_name(getattr(settings, "SWITCHBOARD_CLUSTER", "") or "", db)


class Heart:
    """This process's identity and the record of each beat (its request rate needs the previous beat)."""

    def __init__(self, directory: Path | None, now: float, tally: Tally) -> None:
        self.tally = tally
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}"
        self.server = server_name()
        self.replica = str(getattr(settings, "SWITCHBOARD_REPLICA", ""))  # an operator's name for it
        self.worker, self.slot = worker_slot(directory)  # the slot's lock is held as long as the heart
        self.started_at = now
        self._last: tuple[float, int] = (now, tally.served)

    def record(self, now: float, open_links: list[str]) -> dict[str, Any]:
        last_at, last_served = self._last
        served = self.tally.served
        rps = (served - last_served) / (now - last_at) if now > last_at else 0.0
        self._last = (now, served)
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "server": self.server,
            "replica": self.replica,
            "worker": self.worker,
            "started_at": self.started_at,
            "at": now,
            "interval_s": interval_s(),
            "version": live.current().config_version,  # the configuration version (docs/config-history.md#numbers)
            "in_flight": self.tally.in_flight,
            "served": served,
            "rps": round(rps, 2),
            "open": open_links[:MAX_OPEN_LISTED],
            "open_count": len(open_links),
        }


def open_links(breakers: BreakerRegistry) -> list[str]:
    """Links whose breaker is open, half-open or forced in this process (read on its loop)."""
    out = []
    for view in breakers.views():
        if view.forced_reason is not None or int(view.state) != 0:
            try:
                out.append(BreakerKey.of(view.key).link)
            except ValueError:
                continue
    return sorted(out)


def summarize(records: Iterable[dict[str, Any]], now: float, gone_s: float = GONE_S) -> dict[str, Any]:
    """The list the dashboard shows: each process alive or stale, and which run another configuration.

    Pure. A process is stale once its last heartbeat is older than STALE_BEATS of its own
    intervals; dropped after `gone_s`. The newest version among live processes is the
    current one: a live process on another version is marked `version_mismatch`."""
    rows = []
    for record in records:
        try:
            age = now - float(record["at"])
        except (KeyError, TypeError, ValueError):
            continue
        if age > gone_s:
            continue
        stale_after = STALE_BEATS * float(record.get("interval_s") or 1.0)
        rows.append(
            {
                **record,
                "age_s": round(max(age, 0.0), 1),
                "uptime_s": round(max(float(record["at"]) - float(record.get("started_at") or record["at"]), 0.0)),
                "state": "alive" if age <= stale_after else "stale",
            }
        )
    versions = [row["version"] for row in rows if row["state"] == "alive"]
    latest = max(versions, default=None)
    for row in rows:
        row["version_mismatch"] = row["state"] == "alive" and row["version"] != latest
    rows.sort(key=lambda r: (r["state"] != "alive", r["host"], r.get("replica", ""), r.get("worker", 0), r["pid"]))
    return {
        "processes": rows,
        "latest_version": latest,
        "alive": sum(1 for r in rows if r["state"] == "alive"),
        "stale": sum(1 for r in rows if r["state"] == "stale"),
    }


# --------------------------------------------------------------------------- where beats are kept


def write_file(directory: Path, record: dict[str, Any]) -> None:
    """This worker's beat in the machine's shared directory (atomic: readers never see half a file)."""
    target = directory / f"heartbeat-{record['pid']}.json"
    tmp = directory / f".heartbeat-{record['pid']}.tmp"
    tmp.write_bytes(orjson.dumps(record))
    os.replace(tmp, target)


def read_files(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in directory.glob("heartbeat-*.json"):
        try:
            records.append(orjson.loads(path.read_bytes()))
        except (OSError, orjson.JSONDecodeError):
            continue  # the worker's file vanished or the directory is being removed
    return records


def _redis_keys(cluster: str) -> tuple[str, str]:
    index = REDIS_PREFIX + cluster
    return index, index + ":"


async def write_redis(client: Any, cluster: str, record: dict[str, Any], now: float) -> None:
    """One beat: the record (expires after GONE_S), its entry in the cluster's index, old entries pruned."""
    index, prefix = _redis_keys(cluster)
    pipe = client.pipeline(transaction=False)
    pipe.set(prefix + record["id"], orjson.dumps(record), ex=int(GONE_S))
    pipe.zadd(index, {record["id"]: now})
    pipe.zremrangebyscore(index, "-inf", now - GONE_S)
    await pipe.execute()


def read_redis(client: Any, cluster: str, now: float) -> list[dict[str, Any]]:
    """Every process of the cluster heard from within GONE_S (a sync client: dashboard views)."""
    index, prefix = _redis_keys(cluster)
    ids = client.zrangebyscore(index, now - GONE_S, "+inf")
    if not ids:
        return []
    records = []
    for value in client.mget([prefix + (i.decode() if isinstance(i, bytes) else i) for i in ids]):
        try:
            records.append(orjson.loads(value))
        except (TypeError, orjson.JSONDecodeError):
            continue  # expired between the two reads, or not ours
    return records


def _redis_url() -> str:
    return getattr(settings, "REDIS_URL", "") or ""


def _client_options(for_asyncio: bool) -> dict[str, Any]:
    """Short timeouts and no retries: the heartbeat and the list never wait long on Redis."""
    from redis.backoff import NoBackoff

    if for_asyncio:
        from redis.asyncio.retry import Retry
    else:
        from redis.retry import Retry
    timeout = shared_timeout_s()
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": Retry(NoBackoff(), 0)}


# --------------------------------------------------------------------------- the background task


class Heartbeat:
    """This process's entry in the process list (`Process.heartbeat`): its heart, the record it last
    wrote (the list of one process shows it) and its Redis client."""

    def __init__(self) -> None:
        self.heart: Heart | None = None
        self.last_record: dict[str, Any] | None = None
        self.client: Any = None

    async def run(self, tally: Tally, breakers: BreakerRegistry) -> None:
        """Write this process's heartbeat every interval; a background task of gateway_project.process."""
        directory = shared_dir()
        if self.heart is None:
            self.heart = Heart(directory, clock(), tally)
        heart = self.heart
        url = _redis_url()
        client = None
        if url:
            import redis.asyncio as aioredis

            client = self.client = aioredis.Redis.from_url(url, **_client_options(True))
        cluster = cluster_name()
        failing = False
        retry_at = 0.0
        backoff = interval_s()
        while True:
            now = clock()
            record = self.last_record = heart.record(now, open_links(breakers))
            if directory is not None:
                try:
                    write_file(directory, record)
                except OSError:
                    pass  # `serve` is removing the directory: it is stopping
            if client is not None and now >= retry_at:
                try:
                    await asyncio.wait_for(write_redis(client, cluster, record, now), shared_timeout_s())
                except Exception as exc:  # noqa: BLE001 - Redis down: nothing else depends on the beat
                    if not failing:
                        log.warning(
                            "process heartbeat: Redis unreachable (%s); the dashboard lists this machine only", exc
                        )
                        live.set_degraded("redis", True, "heartbeat")
                    failing = True
                    retry_at = now + backoff
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                else:
                    if failing:
                        log.info("process heartbeat: Redis reachable again")
                        live.set_degraded("redis", False, "heartbeat")
                    failing = False
                    backoff = interval_s()
            await asyncio.sleep(interval_s())

    async def farewell(self) -> None:
        """A clean shutdown (lifespan) takes this process off the list at once instead of going stale."""
        heart = self.heart
        if heart is None:
            return
        directory = shared_dir()
        if directory is not None:
            (directory / f"heartbeat-{heart.pid}.json").unlink(missing_ok=True)
        if self.client is not None:
            index, prefix = _redis_keys(cluster_name())
            try:
                await asyncio.wait_for(self.client.zrem(index, heart.id), shared_timeout_s())
                await asyncio.wait_for(self.client.delete(prefix + heart.id), shared_timeout_s())
            except Exception:  # noqa: BLE001 - Redis down: the entry goes stale, then expires
                pass


# --------------------------------------------------------------------------- the list (dashboard)


@functools.cache
def _redis_client(url: str) -> Any:
    """The dashboard's client of the list (one per URL per interpreter: a connection pool, no process state)."""
    import redis

    return redis.Redis.from_url(url, **_client_options(False))


def _local_records(now: float) -> tuple[list[dict[str, Any]], str]:
    directory = shared_dir()
    if directory is not None:
        return read_files(directory), "machine"
    proc = current()
    if proc.heartbeat is not None and proc.heartbeat.last_record is not None:
        return [proc.heartbeat.last_record], "process"
    return [Heart(None, now, proc.tally).record(now, feed.call_on_loop(lambda: open_links(proc.breakers)))], "process"


def listing(now: float | None = None) -> dict[str, Any]:
    """The processes the dashboard lists, where they came from (redis|machine|process), and any error."""
    now = clock() if now is None else now
    error = None
    if _redis_url():
        try:
            records, source = read_redis(_redis_client(_redis_url()), cluster_name(), now), "redis"
        except Exception as exc:  # noqa: BLE001 - Redis down: say so, show what this machine knows
            error = f"Redis is unreachable ({type(exc).__name__}); showing this machine's processes only."
            records, source = _local_records(now)
    else:
        records, source = _local_records(now)
    return {
        "at": now,
        "source": source,
        "error": error,
        "this_process": f"{socket.gethostname()}:{os.getpid()}",
        **summarize(records, now),
    }
