"""The request path's Redis commands: one connection, one write per event-loop pass (docs/cache.md#batching).

A cache lookup (and an Idempotency-Key's) is the one Redis round trip a request may wait
for, so its client is small. redis-py's asyncio client spent about 64 µs of CPU on a lone
command (the pool's checkout and release, its locks, a stream reader); here a command
costs its packing, the `send()` and the reply's parsing (38 µs on loopback, most of it
the two system calls: `python -m bench.cache_bench --redis URL`). redis-py stays for
everything off the request path; only its URL parser is used here, and only once a
REDIS_URL is given, so a process without Redis never imports it.

How it works:

* `call()` packs the command and gives it a future for its reply. A command sent while
  nothing else is on its way leaves at once; one sent while others are waits for the
  end of the loop pass, so the commands of concurrent requests leave together in one
  `write()`. `later()` always waits for the pass's end: the cache's stores, so that
  they leave after the answer their request sends in the same pass.
* One connection per event loop, opened on first use (AUTH and SELECT from the URL go
  first). Redis answers in order, so the replies resolve the futures first in, first
  out, straight from the protocol's `data_received` (no reader task).
* Each command keeps its own reply and its own error: an error reply raises
  `ReplyError` for that command only. A lost or refused connection fails every
  command on its way with `RedisUnavailable` (a `ConnectionError`); the next
  command opens a new one. `reset()` drops the connection (the owner calls it when a
  command timed out: a hung socket must not keep the next commands).
* A caller that stopped waiting before its command left is skipped (never sent); one
  whose command is out has its reply read and dropped.

Only RESP2 replies, and only what the cache's commands return: simple strings, errors,
integers, bulk strings and (nested) arrays.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any

CRLF = b"\r\n"


class ReplyError(Exception):
    """Redis answered this one command with an error (a script's error, a wrong type, a refused AUTH)."""


class RedisUnavailable(ConnectionError):
    """The connection failed (refused, lost, out of step, its set-up timed out): every command on it."""


class _Incomplete(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP: an array of bulk strings (str as UTF-8, numbers as their decimal text)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, int | float) and not isinstance(arg, bool):
            data = repr(arg).encode()
        else:
            raise TypeError(f"a Redis command argument must be bytes, str or a number, not {type(arg).__name__}")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def parse(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """The reply starting at `pos` and the position after it; _Incomplete when the buffer ends first.
    An error reply is returned as a ReplyError (raised by the one command it answers)."""
    end = buf.find(CRLF, pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos : pos + 1], bytes(buf[pos + 1 : end])
    nxt = end + 2
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, nxt
        if len(buf) < nxt + size + 2:
            raise _Incomplete
        return bytes(buf[nxt : nxt + size]), nxt + size + 2
    if kind == b":":
        return int(line), nxt
    if kind == b"*":
        count = int(line)
        if count < 0:
            return None, nxt
        items = []
        for _ in range(count):
            item, nxt = parse(buf, nxt)
            items.append(item)
        return items, nxt
    if kind == b"+":
        return line, nxt
    if kind == b"-":
        return ReplyError(line.decode(errors="replace")), nxt
    raise RedisUnavailable(f"Redis sent a reply this client cannot read (starts with {kind!r})")


class _Wire(asyncio.Protocol):
    """One connection: writes what it is given, resolves the futures of the replies in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[Any]] = deque()
        self.buf = bytearray()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, futures: list[asyncio.Future[Any]]) -> None:
        self.pending.extend(futures)
        if self.closed:  # lost between the check and now: fail them, do not write into a closed socket
            self.fail(RedisUnavailable("Redis closed the connection"))
            return
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        pending = self.pending
        try:
            while pos < len(buf):
                reply, pos = parse(buf, pos)
                future = pending.popleft()
                if future.done():
                    continue  # its caller stopped waiting
                if isinstance(reply, ReplyError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except _Incomplete:
            pass
        except (ValueError, IndexError, RedisUnavailable) as exc:  # a reply nobody asked for, or garbled
            self.fail(RedisUnavailable(f"Redis connection out of step: {exc}"))
            return
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisUnavailable(f"Redis closed the connection{f': {exc}' if exc else ''}"))

    def fail(self, exc: Exception) -> None:
        """Close the connection and fail every command still waiting for its reply."""
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            try:
                self.transport.abort()
            except RuntimeError:  # its event loop is closed (a test's): nothing left to close
                pass
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(exc)


def _send_all(wire: _Wire, items: list[tuple[bytes, asyncio.Future[Any]]]) -> None:
    """Packed commands in one write, their futures in the same order."""
    wire.send(b"".join(data for data, _ in items), [future for _, future in items])


class Batcher:
    """Redis commands from any number of coroutines, one write per loop pass, on one connection."""

    def __init__(self, url: str, connect_timeout_s: float = 0.1) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        from redis.connection import parse_url  # redis-py's URL rules; imported only where REDIS_URL is set

        self._params = parse_url(url)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wire: _Wire | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._queue: list[tuple[bytes, asyncio.Future[Any]]] = []  # this pass's commands
        self._parked: list[tuple[bytes, asyncio.Future[Any]]] = []  # waiting for the connection
        self._flush_due = False

    async def run(self, *args: Any) -> Any:
        """The reply to `args` (a coroutine over `call`, for callers off the request path)."""
        return await self.call(*args)

    def call(self, *args: Any) -> asyncio.Future[Any]:
        """Send `args` (a Redis command): at once when nothing else is on its way, else with the
        others of this pass in one write at its end. The future holds its reply."""
        loop = self._running_loop()
        wire = self._wire
        if wire is not None and not wire.pending and not self._queue and not wire.closed:
            future = loop.create_future()
            wire.send(pack(args), [future])  # alone: no reason to wait for the pass's end
            return future
        return self._queued(loop, args)

    def later(self, *args: Any) -> asyncio.Future[Any]:
        """Send `args` at the end of this loop pass, in one write with the pass's other commands: for
        writes nobody waits on, which then leave after the answer their request is sending."""
        return self._queued(self._running_loop(), args)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a connection belongs to its loop (tests run several)
            self._adopt(loop)
        return loop

    def _queued(self, loop: asyncio.AbstractEventLoop, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        future = loop.create_future()
        self._queue.append((pack(args), future))
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        return future

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reset()
        self._loop = loop
        self._queue, self._parked, self._connecting, self._flush_due = [], [], None, False

    def _flush(self) -> None:
        self._flush_due = False
        batch = [item for item in self._queue if not item[1].done()]  # callers that gave up: never sent
        self._queue = []
        if not batch:
            return
        wire = self._wire
        if wire is not None and not wire.closed:
            _send_all(wire, batch)
            return
        self._parked.extend(batch)
        if self._connecting is None:
            assert self._loop is not None
            self._connecting = self._loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            wire = await self._open()
        except BaseException as exc:  # noqa: BLE001 - every parked command gets the failure
            error = exc if isinstance(exc, RedisUnavailable) else RedisUnavailable(f"Redis unreachable: {exc!r}")
            parked, self._parked = self._parked, []
            for _, future in parked:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(exc, Exception):
                raise  # cancelled: the loop is going away
            return
        finally:
            self._connecting = None
        self._wire = wire
        parked, self._parked = [item for item in self._parked if not item[1].done()], []
        if parked:
            _send_all(wire, parked)

    async def _open(self) -> _Wire:
        """A new connection, authenticated and on the URL's database."""
        loop = asyncio.get_running_loop()
        p = self._params
        async with asyncio.timeout(self.connect_timeout_s):
            if "path" in p:
                _, wire = await loop.create_unix_connection(_Wire, p["path"])
            else:
                _, wire = await loop.create_connection(
                    _Wire, p.get("host", "localhost"), int(p.get("port", 6379)), ssl=self._tls()
                )
            hello: list[tuple[Any, ...]] = []
            if p.get("password") is not None:
                hello.append(("AUTH", p["username"], p["password"]) if p.get("username") else ("AUTH", p["password"]))
            if p.get("db"):
                hello.append(("SELECT", int(p["db"])))
            if hello:
                futures = [loop.create_future() for _ in hello]
                _send_all(wire, [(pack(args), future) for args, future in zip(hello, futures, strict=True)])
                try:
                    for future in futures:
                        await future
                except ReplyError as exc:
                    wire.fail(RedisUnavailable(str(exc)))
                    raise RedisUnavailable(f"Redis refused the connection's set-up: {exc}") from None
                except BaseException:  # timed out or cancelled half-way: the socket is nobody's
                    wire.fail(RedisUnavailable("Redis connection set-up interrupted"))
                    raise
        return wire

    def _tls(self) -> ssl.SSLContext | None:
        p = self._params
        if p.get("connection_class") is None or "SSL" not in p["connection_class"].__name__:
            return None
        context = ssl.create_default_context(cafile=p.get("ssl_ca_certs"))
        if str(p.get("ssl_cert_reqs", "required")).lower() == "none":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def reset(self) -> None:
        """Drop the connection, failing the commands on it; the next command opens a new one."""
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.fail(RedisUnavailable("Redis connection dropped (a command timed out)"))

    async def drain(self) -> None:
        """Wait until every queued command has been sent and answered (tests, shutdown)."""
        while True:
            futures = [f for _, f in self._queue + self._parked]
            if self._wire is not None:
                futures.extend(self._wire.pending)
            if not futures:
                return
            await asyncio.gather(*futures, return_exceptions=True)

    async def aclose(self) -> None:
        self.reset()
