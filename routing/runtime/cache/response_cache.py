"""Where cached answers live and how identical requests in flight share one call (docs/cache.md).

Two stores behind one small interface (`get` is awaited, `put` never blocks):

- `MemoryCache`: this process's bounded LRU (by entries and by bytes), with an
  injected clock for the TTL. The default without REDIS_URL.
- `RedisCache`: shared by every process and replica when REDIS_URL is set. A lookup
  is one GET under a short timeout; writes go out in the background (SET PX), and
  an answer is readable in this process while its write is on its way. Any Redis
  trouble turns the store off for this process: lookups answer BYPASS (served from
  the upstream, never an error) without touching Redis, `switchboard_degraded
  {component="redis"}` is 1 and one log line says so; a background probe
  turns it back on when Redis answers again.

`Coalescer` makes identical cacheable requests in flight together share one
upstream call in this process: the first leads, the others wait (bounded by their
own deadline) for its answer. A leader's error answer is every follower's error
(one call, one outcome); a leader that is cancelled (its client left) hands over:
a follower calls itself.

Across processes, the Redis store adds a short claim (SET NX PX on a claim key, for
the call's deadline), taken in the lookup's own round trip (`get_or_claim`: one
script that GETs the entry and, on a miss, takes the claim, so a miss costs one
round trip before the upstream call, not two): the process that takes it makes the call and
deletes the claim once the answer is stored; a process that finds it taken polls
(`wait_other`: one MGET of answer and claim every CLAIM_POLL_S) until the answer
is there, and calls itself when the claim ends without one. Without Redis (or
when it fails) every process calls on its own. A claim carries its process's token,
and a lookup that finds its own process's claim counts it as taken: two lookups of
one process can come back in either order, and a process never waits on itself (its
coalescer shares the call; waiting on Redis there would deadlock with a request
already following it in memory). The token also serves the recovery:
a lookup that timed out may still have taken a claim once Redis got to it, so the
process frees those (only if still its own) before it uses Redis again, and no
other process waits a whole request deadline for a call nobody is making.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from routing.core.compact import compact
from routing.runtime.cache.redis_batch import Batcher

log = logging.getLogger("switchboard.cache")

DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_ENTRY_BYTES = 1024 * 1024
DEFAULT_REDIS_TIMEOUT_S = 0.1
PROBE_EVERY_S = 0.5
MAX_PENDING_WRITES = 256
COMPRESS_FROM = 1024  # bytes of answer; smaller ones are stored as they are
BYPASS: Any = object()  # a lookup's "the store is unavailable" (Redis down)
LOCK_PREFIX = "switchboard:cache-claim:"  # + the entry's key: "a process is making this call"
CLAIM_POLL_S = 0.02  # how often a request waiting on another process's call looks for its answer

# The lookup and, on a miss, the claim, in one round trip. KEYS entry, claim; ARGV claim ttl (ms),
# the claimant's token. -> {1, entry} on a hit, {0, 1} on a miss with the claim this process's
# (taken now, or already its own: a process never waits on itself, its coalescer shares the call),
# {0, 0} when another process holds it.
GET_OR_CLAIM_SCRIPT = """
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1]) or redis.call('GET', KEYS[2]) == ARGV[2] then
  return {0, 1}
end
return {0, 0}
"""
# The claim alone, with the same answer. KEYS claim; ARGV as above. -> 1 this process's, 0 another's.
CLAIM_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1]) or redis.call('GET', KEYS[1]) == ARGV[2] then
  return 1
end
return 0
"""
# Free a claim only if it is still this process's (it may have expired and been taken by another).
UNCLAIM_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored 200 answer and what its usage record and headers need on a hit."""

    body: bytes
    model_used: str
    provider: str
    prompt_tokens: int | None
    completion_tokens: int | None

    @property
    def size(self) -> int:
        return len(self.body) + len(self.model_used) + len(self.provider) + 64


def encode_entry(entry: Entry) -> bytes:
    """Redis value: a one-byte format flag, a JSON line of metadata, the body (zlib when that pays)."""
    meta = orjson.dumps([entry.model_used, entry.provider, entry.prompt_tokens, entry.completion_tokens])
    raw = meta + b"\n" + entry.body
    if len(entry.body) >= COMPRESS_FROM:
        packed = zlib.compress(raw, 1)
        if len(packed) < len(raw) * 0.9:
            return b"z" + packed
    return b"r" + raw


def decode_entry(value: bytes) -> Entry:
    flag, data = value[:1], value[1:]
    if flag == b"z":
        data = zlib.decompress(data)
    elif flag != b"r":
        raise ValueError("unknown cache entry format")
    meta, _, body = data.partition(b"\n")
    model_used, provider, prompt, completion = orjson.loads(meta)
    return Entry(body, model_used, provider, prompt, completion)


class MemoryCache:
    """A bounded LRU of entries with a TTL each; `clock` is monotonic seconds (injectable)."""

    name = "memory"

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = min(max_entry_bytes, max_bytes)
        self._clock = clock
        self._entries: OrderedDict[str, tuple[Entry, float]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str) -> Entry | None:
        """The live entry under `key` (refreshed as most recently used), or None."""
        item = self._entries.get(key)
        if item is None:
            return None
        entry, expires_at = item
        if expires_at <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry

    async def get(self, key: str) -> Entry | None:
        return self.lookup(key)

    def put(self, key: str, entry: Entry, ttl_s: float) -> bool:
        """Keep `entry` for `ttl_s`, evicting least recently used ones over the bounds; False if too big."""
        size = entry.size
        if size > self.max_entry_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        # kept until evicted: a translated answer comes from orjson, whose bytes hold its whole buffer
        entry = replace(entry, body=compact(entry.body))
        self._entries[key] = (entry, self._clock() + ttl_s)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)
        return True

    def _drop(self, key: str) -> None:
        entry, _ = self._entries.pop(key)
        self.bytes -= entry.size

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    async def claim(self, key: str, ttl_s: float) -> bool:
        """One process: the in-flight table is the only claim there is."""
        return True

    async def get_or_claim(self, key: str, ttl_s: float) -> tuple[Entry | None, bool]:
        """The entry, or None and True (this process's in-flight table is the only claim)."""
        found = self.lookup(key)
        return found, found is None

    def holds(self, key: str) -> bool:
        return True

    async def wait_other(self, key: str, timeout_s: float) -> Entry | None:
        return None

    def release(self, key: str) -> None:
        return None

    async def drain(self) -> None:
        return None

    async def warm(self) -> None:
        return None


class RedisCache:
    """Entries in Redis with their TTL, failing open; see the module docstring."""

    name = "redis"

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_REDIS_TIMEOUT_S,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        on_degraded: Callable[[bool], None] | None = None,
        probe_every_s: float = PROBE_EVERY_S,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_entry_bytes = max_entry_bytes
        self.on_degraded = on_degraded
        self.probe_every_s = probe_every_s
        self.down = False
        self._writing: dict[str, Entry] = {}  # answers whose write is on its way: readable here already
        self._claims: set[str] = set()  # keys whose cluster-wide claim this process holds
        self._unsure: set[str] = set()  # claims a failed lookup may have taken: freed on recovery
        self._token = uuid.uuid4().hex.encode()  # this process's claims' value
        self._batch = Batcher(url, timeout_s)  # one connection, the commands of a loop pass in one write
        self._writes: set[asyncio.Future[Any]] = set()  # stores on their way (bounded: MAX_PENDING_WRITES)
        self._tasks: set[asyncio.Task[None]] = set()
        self._probe: asyncio.Task[None] | None = None

    async def get(self, key: str) -> Entry | None:
        """The entry under `key`, None on a miss, BYPASS while Redis is unavailable (no round trip then)."""
        writing = self._writing.get(key)
        if writing is not None:
            return writing
        if self.down:
            return BYPASS
        try:
            async with asyncio.timeout(self.timeout_s):
                value = await self._run("GET", key)
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._failed(exc)
            return BYPASS
        if value is None:
            return None
        try:
            return decode_entry(value)
        except (ValueError, TypeError, zlib.error, orjson.JSONDecodeError):
            log.warning("ignoring an unreadable response cache entry in Redis")
            return None

    async def get_or_claim(self, key: str, ttl_s: float) -> tuple[Entry | None, bool]:
        """(entry, False) on a hit; (None, True) on a miss with the cluster-wide claim taken by this call;
        (None, False) on a miss whose call another process is making; (BYPASS, False) while Redis is
        unavailable. One round trip (GET_OR_CLAIM_SCRIPT)."""
        writing = self._writing.get(key)
        if writing is not None:
            return writing, False
        if self.down:
            return BYPASS, False
        try:
            async with asyncio.timeout(self.timeout_s):
                hit, value = await self._run(
                    "EVAL", GET_OR_CLAIM_SCRIPT, 2, key, LOCK_PREFIX + key, max(1, int(ttl_s * 1000)), self._token
                )
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._unsure.add(key)  # Redis may run it after this gave up: its claim is nobody's
            self._failed(exc)
            return BYPASS, False
        if not hit:
            if value:
                self._claims.add(key)
            return None, bool(value)
        try:
            return decode_entry(value), False
        except (ValueError, TypeError, zlib.error, orjson.JSONDecodeError):
            log.warning("ignoring an unreadable response cache entry in Redis")
            return None, await self.claim(key, ttl_s)

    def holds(self, key: str) -> bool:
        """This process holds the cluster-wide claim on `key` (taken by another of its requests' lookups)."""
        return key in self._claims

    def _run(self, *command: Any) -> Awaitable[Any]:
        """One Redis command whose reply a request awaits (routing/runtime/cache/redis_batch.py): the
        command's future itself, no coroutine around it."""
        return self._batch.call(*command)

    def put(self, key: str, entry: Entry, ttl_s: float) -> bool:
        """Write `entry` in the background; skipped while Redis is down, too big, or too many writes wait."""
        if self.down or entry.size > self.max_entry_bytes or len(self._writes) >= MAX_PENDING_WRITES:
            self.release(key)  # nobody elsewhere should wait for an answer that is not coming
            return False
        self._writing[key] = entry
        claimed = key in self._claims
        # after this loop pass: the answer goes to its client first (it is readable here meanwhile)
        stored = self._batch.later("SET", key, encode_entry(entry), "PX", max(1, int(ttl_s * 1000)))
        freed = None
        if claimed:  # stored, then freed in the same write: callers elsewhere waiting on it read it
            self._claims.discard(key)
            freed = self._batch.later("DEL", LOCK_PREFIX + key)
        last = freed or stored
        self._writes.add(last)
        last.add_done_callback(lambda _: self._written(key, entry, stored, freed))
        return True

    def _written(self, key: str, entry: Entry, *replies: asyncio.Future[Any] | None) -> None:
        failure = None
        for reply in replies:
            if reply is not None:
                self._writes.discard(reply)
                exc = None if reply.cancelled() else reply.exception()  # retrieved: never "unretrieved"
                failure = failure or exc
        if self._writing.get(key) is entry:
            del self._writing[key]
        if failure is not None:
            if replies[1] is not None:
                self._unsure.add(key)  # the claim may still be there
            self._failed(failure)

    # ------------------------------------------------------------------ coalescing across processes

    async def claim(self, key: str, ttl_s: float) -> bool:
        """Take the cluster-wide claim on making this call (SET NX PX, or this process's already):
        False when another process holds it.

        Any Redis trouble answers True: without Redis each process makes its own call.
        """
        if self.down:
            return True
        try:
            async with asyncio.timeout(self.timeout_s):
                taken = await self._run(
                    "EVAL", CLAIM_SCRIPT, 1, LOCK_PREFIX + key, max(1, int(ttl_s * 1000)), self._token
                )
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._unsure.add(key)
            self._failed(exc)
            return True
        if taken:
            self._claims.add(key)
        return bool(taken)

    async def wait_other(self, key: str, timeout_s: float) -> Entry | None:
        """The answer another process is making, polled until it is stored; None when its claim ends
        without one (it failed, or died and the claim expired), when Redis fails, or after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.down:
            await asyncio.sleep(CLAIM_POLL_S)
            try:
                async with asyncio.timeout(self.timeout_s):
                    value, claimed = await self._run("MGET", key, LOCK_PREFIX + key)
            except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
                self._failed(exc)
                return None
            if value is not None:
                try:
                    return decode_entry(value)
                except (ValueError, TypeError, zlib.error, orjson.JSONDecodeError):
                    return None
            if claimed is None:
                return None
        return None

    def release(self, key: str) -> None:
        """Give up this process's claim without an answer (an error, a cancelled call), in the background."""
        if key not in self._claims:
            return
        self._claims.discard(key)
        if self.down:
            self._unsure.add(key)  # freed once Redis is back
            return
        task = asyncio.get_running_loop().create_task(self._unclaim(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _unclaim(self, key: str) -> None:
        try:
            async with asyncio.timeout(self.timeout_s * 5):
                await self._run("EVAL", UNCLAIM_SCRIPT, 1, LOCK_PREFIX + key, self._token)
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._unsure.add(key)
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        if self.down:
            return
        self.down = True
        self._batch.reset()  # a timed-out command may have left the socket hung: the probe opens a new one
        log.warning(
            "Redis at REDIS_URL is unreachable for the response cache (%s); answering from the upstream "
            "(X-Switchboard-Cache: bypass) until it is back",
            exc.__class__.__name__ if not str(exc) else exc,
        )
        if self.on_degraded is not None:
            self.on_degraded(True)
        self._probe = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """Ping Redis off the request path until it answers, then turn the store back on."""
        while True:
            await asyncio.sleep(self.probe_every_s)
            try:
                async with asyncio.timeout(self.timeout_s * 5):
                    await self._batch.run("PING")
                    await self._free_unsure()
            except Exception:  # noqa: BLE001 - still down
                continue
            self.down = False
            log.info("Redis is reachable again; the response cache is shared again")
            if self.on_degraded is not None:
                self.on_degraded(False)
            return

    async def _free_unsure(self) -> None:
        """Free the claims failed lookups may have taken, unless a request of this process holds one now."""
        while self._unsure:
            key = self._unsure.pop()
            if key in self._claims:
                continue  # a request holds it again: its store or release frees it
            try:
                await self._run("EVAL", UNCLAIM_SCRIPT, 1, LOCK_PREFIX + key, self._token)
            except BaseException:
                self._unsure.add(key)  # the next probe tries again
                raise

    async def warm(self) -> None:
        """Connect at boot, off the request path, so a process's first lookup is one round trip within
        its 100 ms bound rather than a connect too."""
        try:
            async with asyncio.timeout(max(1.0, self.timeout_s * 10)):
                await self._batch.run("PING")
        except Exception as exc:  # noqa: BLE001 - the first lookup finds out and fails open
            log.debug("response cache warm-up: %s", exc)

    async def drain(self) -> None:
        """Wait for pending writes (tests, the benchmark)."""
        while self._tasks or self._writes:
            await asyncio.gather(*self._tasks, *self._writes, return_exceptions=True)
            await self._batch.drain()

    async def aclose(self) -> None:
        """Close the connection and stop the probe (tests; a process's end closes it anyway)."""
        if self._probe is not None:
            self._probe.cancel()
        self._batch.reset()


class Flight:
    """One upstream call that identical requests share: its outcome once known."""

    __slots__ = ("future", "followers")

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future
        self.followers = 0


class Handover(Exception):
    """The leader went away without an outcome: the follower makes the call itself."""


class Coalescer:
    """Identical requests in flight in this process share one call; see the module docstring."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def flight(self, key: str) -> Flight | None:
        return self._flights.get(key)

    def lead(self, key: str) -> Flight:
        flight = Flight(asyncio.get_running_loop().create_future())
        self._flights[key] = flight
        return flight

    def finish(self, key: str, flight: Flight, result: Any) -> None:
        """The leader's outcome: an Entry, or a GatewayError for the followers to raise."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.future.done():
            flight.future.set_result(result)

    def abandon(self, key: str, flight: Flight) -> None:
        """The leader stops without an outcome (cancelled, unexpected failure): followers take over."""
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.future.done():
            flight.future.set_exception(Handover())
            flight.future.exception()  # retrieved: no "never retrieved" warning without followers

    async def follow(self, flight: Flight, timeout_s: float) -> Any:
        """The leader's outcome, waiting at most `timeout_s` (TimeoutError); Handover if it went away."""
        flight.followers += 1
        async with asyncio.timeout(max(0.0, timeout_s)):
            return await asyncio.shield(flight.future)


Store = MemoryCache | RedisCache


def build_store(on_degraded: Callable[[bool], None] | None = None) -> Store:
    """The process's store from the settings: Redis when REDIS_URL is set, else the bounded LRU."""
    from django.conf import settings

    max_entry = int(getattr(settings, "SWITCHBOARD_CACHE_MAX_ENTRY_BYTES", DEFAULT_MAX_ENTRY_BYTES))
    url = getattr(settings, "REDIS_URL", "") or ""
    if url:
        timeout = float(getattr(settings, "SWITCHBOARD_CACHE_REDIS_TIMEOUT_MS", DEFAULT_REDIS_TIMEOUT_S * 1000))
        return RedisCache(url, timeout / 1000.0, max_entry, on_degraded)
    return MemoryCache(
        int(getattr(settings, "SWITCHBOARD_CACHE_MAX_ENTRIES", DEFAULT_MAX_ENTRIES)),
        int(getattr(settings, "SWITCHBOARD_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)),
        max_entry,
    )
