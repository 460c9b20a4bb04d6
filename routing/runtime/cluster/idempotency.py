"""Idempotency-Key for non-streaming chat (docs/api.md#idempotency): one upstream call per key and body.

A key is (org, Idempotency-Key header) and is bound to the sha256 of the request
body. `begin` gives the caller one of three claims:

- replay: a completed 2xx answer for the same key and body within the TTL
  (the caller sends it with `Idempotent-Replayed: true`);
- conflict: the key was used with a different body (caller answers 409
  `idempotency_key_reused`);
- owner: the caller runs the request and then calls `complete` (or `release`
  on failure or cancellation, so a retry can run).

Concurrent duplicates in this process wait for the owner's outcome instead of
calling the upstream again. Only 2xx answers are stored; failures release the key.

Answers live in a bounded in-memory LRU with an injectable clock. When REDIS_URL
is set they are also written to Redis (SET NX with the TTL, off the request path)
and read from it on a local miss, so replays work across processes and replicas;
concurrent duplicates on *different* processes are not coalesced. Redis errors
fail open to memory: each command is bounded (REDIS_TIMEOUT_S), an outage is logged
once, and Redis is left alone for a while before the next try. The commands go over
the response cache's small client (routing/runtime/cache/redis_batch.py, docs/cache.md#batching):
the lookup is on the request path of every request that carries the header.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from routing.runtime.cache.redis_batch import Batcher

log = logging.getLogger("switchboard.idempotency")

REPLAY_HEADER = "Idempotent-Replayed"
DEFAULT_TTL_S = 24 * 3600
DEFAULT_MAX_ENTRIES = 10_000
REDIS_TIMEOUT_S = 0.25
REDIS_RETRY_AFTER_S = 30.0
REDIS_PREFIX = "switchboard:idempotency:"

Key = tuple[str, str]
Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Answer:
    """A stored completed answer."""

    body_hash: str
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    expires_at: float


@dataclass(slots=True)
class Claim:
    """The result of `begin`: exactly one of conflict, replay, or ownership (`owner`)."""

    key: Key
    body_hash: str
    conflict: bool = False
    replay: tuple[int, Headers, bytes] | None = None
    future: asyncio.Future[Answer | None] | None = field(default=None, repr=False)

    @property
    def owner(self) -> bool:
        return self.future is not None


def _headers(headers: Iterable[tuple[Any, Any]] | Any) -> tuple[tuple[bytes, bytes], ...]:
    items = headers.items() if hasattr(headers, "items") else headers
    out = []
    for name, value in items:
        out.append(
            (
                name if isinstance(name, bytes) else str(name).encode("latin-1"),
                value if isinstance(value, bytes) else str(value).encode("latin-1"),
            )
        )
    return tuple(out)


def encode_answer(answer: Answer) -> bytes:
    """Redis value: one JSON line of metadata, then the raw body."""
    meta = {
        "h": answer.body_hash,
        "s": answer.status,
        "hd": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in answer.headers],
        "x": answer.expires_at,
    }
    return orjson.dumps(meta) + b"\n" + answer.body


def decode_answer(raw: bytes) -> Answer:
    meta_raw, _, body = raw.partition(b"\n")
    meta = orjson.loads(meta_raw)
    headers = tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in meta["hd"])
    return Answer(meta["h"], int(meta["s"]), headers, body, float(meta["x"]))


class IdempotencyStore:
    """Per-process idempotency state; see the module docstring.

    `ttl_s` / `redis_url` default to settings.SWITCHBOARD_IDEMPOTENCY_TTL_S /
    settings.REDIS_URL, read on first use ("" disables Redis). `clock` is wall
    time (Redis TTLs are wall time too).
    """

    def __init__(
        self,
        *,
        ttl_s: float | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
        redis_url: str | None = None,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._redis_url = redis_url
        self._answers: OrderedDict[Key, Answer] = OrderedDict()
        self._inflight: dict[Key, tuple[str, asyncio.Future[Answer | None]]] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._redis: Batcher | None = None
        self._redis_down_until = 0.0

    # ------------------------------------------------------------------ settings

    @property
    def ttl_s(self) -> float:
        if self._ttl_s is None:
            from django.conf import settings

            self._ttl_s = float(getattr(settings, "SWITCHBOARD_IDEMPOTENCY_TTL_S", DEFAULT_TTL_S))
        return self._ttl_s

    @property
    def redis_url(self) -> str:
        if self._redis_url is None:
            from django.conf import settings

            self._redis_url = getattr(settings, "REDIS_URL", "") or ""
        return self._redis_url

    def __len__(self) -> int:
        return len(self._answers)

    # ------------------------------------------------------------------ protocol

    async def begin(self, org: str, key: str, body_hash: str) -> Claim:
        """Claim the key: replay, conflict, or ownership (waits while a duplicate is in flight)."""
        k = (org, key)
        while True:
            answer = self._lookup(k)
            if answer is not None:
                return self._claim_from(k, body_hash, answer)
            inflight = self._inflight.get(k)
            if inflight is None:
                break
            owner_hash, future = inflight
            if owner_hash != body_hash:
                return Claim(k, body_hash, conflict=True)
            # The owner either stores an answer (replayed on the next pass) or
            # releases the key (the next pass makes this caller the owner).
            await asyncio.shield(future)

        future: asyncio.Future[Answer | None] = asyncio.get_running_loop().create_future()
        self._inflight[k] = (body_hash, future)
        claim = Claim(k, body_hash, future=future)
        if self.redis_url:
            try:
                answer = await self._redis_get(k)
            except BaseException:
                self.release(claim)
                raise
            if answer is not None:
                self._remember(k, answer)
                self._finish(claim, answer)
                return self._claim_from(k, body_hash, answer)
        return claim

    def complete(self, claim: Claim, status: int, headers: Iterable[tuple[Any, Any]] | Any, body: bytes) -> None:
        """Record the owner's answer: a 2xx is stored for the TTL and replayed; anything else releases the key."""
        if claim.future is None or claim.future.done():
            return
        if not 200 <= status < 300:
            self.release(claim)
            return
        answer = Answer(claim.body_hash, status, _headers(headers), bytes(body), self._clock() + self.ttl_s)
        self._remember(claim.key, answer)
        self._finish(claim, answer)
        if self.redis_url and self._redis_usable():
            task = asyncio.get_running_loop().create_task(self._redis_set(claim.key, answer))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    def release(self, claim: Claim) -> None:
        """Give the key up without an answer (failure, cancellation): waiters may retry."""
        if claim.future is None or claim.future.done():
            return
        self._finish(claim, None)

    async def drain(self) -> None:
        """Wait for pending Redis writes (tests, shutdown)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    # ------------------------------------------------------------------ memory

    def _claim_from(self, k: Key, body_hash: str, answer: Answer) -> Claim:
        if answer.body_hash != body_hash:
            return Claim(k, body_hash, conflict=True)
        return Claim(k, body_hash, replay=(answer.status, list(answer.headers), answer.body))

    def _lookup(self, k: Key) -> Answer | None:
        answer = self._answers.get(k)
        if answer is None:
            return None
        if answer.expires_at <= self._clock():
            del self._answers[k]
            return None
        self._answers.move_to_end(k)
        return answer

    def _remember(self, k: Key, answer: Answer) -> None:
        self._answers[k] = answer
        self._answers.move_to_end(k)
        while len(self._answers) > self._max_entries:
            self._answers.popitem(last=False)

    def _finish(self, claim: Claim, answer: Answer | None) -> None:
        future = claim.future
        assert future is not None
        current = self._inflight.get(claim.key)
        if current is not None and current[1] is future:
            del self._inflight[claim.key]
        if not future.done():
            future.set_result(answer)

    # ------------------------------------------------------------------ redis

    def _redis_key(self, k: Key) -> str:
        digest = hashlib.sha256(f"{k[0]}\0{k[1]}".encode()).hexdigest()
        return REDIS_PREFIX + digest

    def _redis_usable(self) -> bool:
        return self._clock() >= self._redis_down_until

    def _client(self) -> Batcher:
        """The store's Redis connection (the response cache's small client: routing/runtime/cache/redis_batch.py)."""
        if self._redis is None:
            self._redis = Batcher(self.redis_url, REDIS_TIMEOUT_S)
        return self._redis

    async def _command(self, *args: Any) -> Any:
        """One command within REDIS_TIMEOUT_S; a timed-out one drops the connection (it may hang)."""
        client = self._client()
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                return await client.call(*args)
        except TimeoutError:
            client.reset()
            raise

    def _redis_failed(self, exc: BaseException) -> None:
        if self._redis_down_until == 0.0:
            log.warning(
                "Redis at REDIS_URL is unreachable for idempotency (%s); using this process's memory only, retrying in %.0f s",
                exc,
                REDIS_RETRY_AFTER_S,
            )
        self._redis_down_until = self._clock() + REDIS_RETRY_AFTER_S

    def _redis_ok(self) -> None:
        if self._redis_down_until:
            log.info("Redis is reachable again; idempotency answers are shared again")
            self._redis_down_until = 0.0

    async def _redis_get(self, k: Key) -> Answer | None:
        if not self._redis_usable():
            return None
        try:
            raw = await self._command("GET", self._redis_key(k))
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._redis_failed(exc)
            return None
        self._redis_ok()
        if raw is None:
            return None
        try:
            answer = decode_answer(raw)
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring an unreadable idempotency entry in Redis")
            return None
        return answer if answer.expires_at > self._clock() else None

    async def _redis_set(self, k: Key, answer: Answer) -> None:
        ttl = max(1, math.ceil(answer.expires_at - self._clock()))
        try:
            await self._command("SET", self._redis_key(k), encode_answer(answer), "EX", ttl, "NX")
        except Exception as exc:  # noqa: BLE001 - fail open on any Redis trouble
            self._redis_failed(exc)
            return
        self._redis_ok()
