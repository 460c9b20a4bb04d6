"""Header limits for uvicorn + httptools, which has none of its own (docs/security.md#header-limits),
and the server edge's deadlines and connection cap (docs/security.md#server-edge).

httptools accumulates a header value chunk by chunk until its end; one request
with a 64 MiB header pushed every other request's latency into seconds and a
256 MiB one grew the process by 500 MB. This protocol counts the bytes fed while
a request's head is incomplete and the parsed request line and headers; past
SWITCHBOARD_MAX_HEADER_BYTES / SWITCHBOARD_MAX_HEADERS it answers 431
headers_too_large, stops parsing, discards (never buffers) what the client still
sends for a moment so the answer is read, then closes the connection.

It also hands each response cycle a transport that sends a response's head together
with its body's first write (`_OneWrite`): uvicorn writes them separately, and on
loopback each write is a send() that wakes the client; one answer, one send().

Slow clients and connection floods (docs/security.md#server-edge): a request head must be
complete SWITCHBOARD_HEAD_TIMEOUT_S after its first byte (or after the connection opened),
a body must bring at least SWITCHBOARD_BODY_MIN_BYTES more in every SWITCHBOARD_BODY_TIMEOUT_S while
the application reads it (routing.core.body_progress),
idle keep-alive connections close after SWITCHBOARD_KEEPALIVE_S, and a connection past the
process's cap is closed as soon as it is accepted. The deadlines are checked by one sweep
per process (`_Sweeper`), not a timer per request. A response that ends before its request
body was read (a 413) closes the connection the same lingering way as a 431.

Used with `uvicorn --http gateway_project.http_limits:LimitedHttpToolsProtocol`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway_project import edge
from routing.core.body_progress import BodyProgress
from routing.core.errors import headers_too_large

LINGER_S = edge.LINGER_S  # how long the rest of a rejected request is read and dropped before closing


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a request whose head is over the limit."""


class _OneWrite:
    """The response cycle's view of its transport: the response head is held until the
    body's first write and sent with it (one send(), one segment). A head whose body does
    not follow in the same loop pass (a stream still waiting) goes out at the next pass."""

    __slots__ = ("_transport", "_loop", "_head", "_protocol")

    def __init__(self, transport: Any, loop: Any, protocol: LimitedHttpToolsProtocol | None = None) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._protocol = protocol

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
        elif data[:5] == b"HTTP/" and data[9:12] != b"100" and data[-4:] == b"\r\n\r\n":
            self._head = data  # a response head (never the interim 100 Continue the client waits for)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self._flush()
        protocol = self._protocol
        cycle = protocol.cycle if protocol is not None else None
        if cycle is not None and cycle.more_body and not protocol._rejected:
            protocol._linger()  # answered before the body was read (413): let the client read it
        else:
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Sweeper:
    """Closes the connections of this process whose head or body deadline passed: one pass
    every `interval` seconds over the server's connection set (uvicorn's own), so a request
    pays a clock read instead of a timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connections: set[Any], interval: float) -> None:
        self.loop, self.connections, self.interval = loop, connections, interval
        self.slow = edge.SlowBodyLog()
        loop.call_later(interval, self.sweep)

    def sweep(self) -> None:
        now = self.loop.time()
        for protocol in list(self.connections):
            deadline = getattr(protocol, "_deadline", 0.0)
            if deadline and now > deadline and protocol._timed_out(now):
                self.slow.closed += 1
        self.slow.swept()
        self.loop.call_later(self.interval, self.sweep)


_sweepers: dict[int, _Sweeper] = {}  # one per event loop (id of the loop)
_cap_log = edge.CapLog()
# connections waiting for a request head, the longest waiting first: the ones closed at the cap
_heads: dict[LimitedHttpToolsProtocol, None] = {}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on the request head (431 above it), head and
    body deadlines, a keep-alive timeout and a cap on connections (docs/security.md#server-edge)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        lim = edge.limits()
        self._max_bytes, self._max_count = lim.max_header_bytes, lim.max_headers
        self.timeout_keep_alive = lim.keepalive_s
        self._head_s, self._body_s, self._cap = lim.head_timeout_s, lim.body_timeout_s, lim.max_connections
        self._deadline = 0.0  # loop time by which the head must be complete / the body progress; 0: none
        self._min_bytes = lim.body_min_bytes
        self._progress: BodyProgress | None = None  # the body's, while it is read
        self._head_bytes = 0  # bytes received while the current request's head is incomplete
        self._parsed_bytes = 0  # request line + header names and values parsed so far
        self._header_count = 0
        self._in_head = True
        self._rejected = False

    # connection -----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._cap:
            # at the cap the connection that waited longest for its head makes room (a flood of
            # half-open connections churns itself, /health still gets in); when every connection
            # is serving a request the new one is closed. Either way a descriptor is freed now.
            _cap_log.full(self._cap)
            victim = next(iter(_heads), None)
            if victim is None:
                transport.abort()
                return
            del _heads[victim]
            victim._deadline = 0.0
            victim.transport.abort()
        else:
            _cap_log.below()
        _heads[self] = None
        self._deadline = self.loop.time() + self._head_s  # a connection that sends nothing
        loop_id = id(self.loop)
        if loop_id not in _sweepers:
            _sweepers[loop_id] = _Sweeper(self.loop, self.connections, min(1.0, self._head_s / 4, self._body_s / 4))

    def _timed_out(self, now: float) -> bool:
        """The head or body deadline passed: close, unless the application is not reading the body
        (flow control paused reading: not the client's fault). True when a body's progress was too slow."""
        cycle = self.cycle
        progress = self._progress
        if not self._in_head and cycle is not None and self.flow is not None and self.flow.read_paused:
            if progress is not None:
                progress.restart(now)
            self._deadline = now + self._body_s
            return False
        self._deadline = 0.0
        _heads.pop(self, None)
        self.transport.close()
        return not self._in_head

    def connection_lost(self, exc: Exception | None) -> None:
        _heads.pop(self, None)
        super().connection_lost(exc)

    # parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._parsed_bytes = self._header_count = 0
        self._in_head = True
        self._deadline = self.loop.time() + self._head_s
        _heads.pop(self, None)
        _heads[self] = None  # the newest head now
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._parsed_bytes += len(url)
        if self._parsed_bytes > self._max_bytes:
            raise _HeadTooLarge
        self.url += url  # HttpToolsProtocol.on_url, inlined (called per request)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed_bytes += len(name) + len(value) + 4
        self._header_count += 1
        if self._parsed_bytes > self._max_bytes or self._header_count > self._max_count:
            raise _HeadTooLarge
        # HttpToolsProtocol.on_header, inlined (called per header)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._progress = BodyProgress(self._body_s, self._min_bytes, self.loop.time())
        self._deadline = self._progress.deadline  # cleared when the message is complete
        _heads.pop(self, None)
        super().on_headers_complete()
        cycle = self.cycle
        # HEAD answers have no body write to carry the head: left as uvicorn sends them
        if cycle is not None and cycle.scope is self.scope and self.scope["method"] != "HEAD":
            cycle.transport = _OneWrite(self.transport, self.loop, self)

    def on_body(self, body: bytes) -> None:
        progress = self._progress
        if progress is not None and progress.fed(len(body), self.loop.time()):
            self._deadline = progress.deadline  # enough more of the body: the next window
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._progress = None
        self._deadline = 0.0  # the keep-alive timeout (uvicorn's) takes over after the answer
        self._in_head = True  # what comes next on this connection is the next request's head

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle = self.cycle
        if self._rejected or self.transport.is_closing():
            return
        if cycle is not None and cycle.more_body:
            # answered before the body was read (a 401 to an unauthenticated upload): the rest is
            # not read into the next request's place for ever, the connection ends after a linger
            self._linger()
        elif self._in_head:  # not a pipelined request already read
            _heads[self] = None  # kept alive, waiting for its next head: closed first at the cap

    # data -----------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return  # dropped, not buffered
        if self._in_head:
            self._head_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if isinstance(exc.__cause__ or exc.__context__, _HeadTooLarge):
                self._reject()
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_head and self._head_bytes > self._max_bytes + len(data):
            # no end of the head after more than the limit; the slack of one chunk covers a
            # chunk that also carried the end of the previous request
            self._reject()

    def _reject(self) -> None:
        error = headers_too_large(self._max_bytes, self._max_count)
        body = error.body()
        head = (
            f"HTTP/1.1 {error.status} Request Header Fields Too Large\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode("latin-1")
        self.logger.warning("request head over %d bytes / %d headers: answered 431", self._max_bytes, self._max_count)
        self.transport.write(head + body)
        self._linger()

    def _linger(self) -> None:
        """After an answer that refused the request: what the client still sends is read and
        dropped (never buffered) for LINGER_S so it reads the answer (closing on unread data
        would reset the connection under it), then the connection is closed."""
        self._rejected = True
        self._deadline = 0.0
        transport = self.transport
        try:
            if transport.can_write_eof():
                transport.write_eof()
        except (OSError, RuntimeError):
            pass
        if self.flow is not None:
            self.flow.resume_reading()
        self.loop.call_later(LINGER_S, transport.close)
