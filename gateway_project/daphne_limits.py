"""daphne with the server edge's limits (docs/security.md#server-edge).

daphne (Twisted) reads a request's whole body, to memory or a temporary file, before it
calls the application, and never times out a connection whose head or body stalls: a
1 GB upload was read in full before its 401, and thousands of half-open connections ran
the process out of file descriptors. Run as
`python -m gateway_project.daphne_limits <daphne's arguments>` (what `manage.py serve
--server daphne` runs), daphne gets:

- the body limits of `gateway_project.edge.body_limit` applied in Twisted's channel: a
  `Content-Length` over the limit is answered 413 before a byte of the body is read, a
  chunked body the moment it passes the limit; bodies under it are kept in memory, never
  spooled to disk. The rest of a refused request is read and dropped for a moment so
  the client reads the answer, then the connection is closed;
- the head limits of uvicorn's protocol (gateway_project/http_limits.py): 431
  `headers_too_large` in the error shape, where Twisted answered a bare 400;
- the head, body-progress (bytes per window: routing.core.body_progress) and keep-alive deadlines,
  checked by one sweep per second;
- the cap on connections: past it a new connection is closed as soon as it is accepted;
- the listen backlog of uvicorn (edge.LISTEN_BACKLOG) where Twisted's is 50: a burst of a few
  hundred new connections overflowed it, and the kernel reset some of them mid-request.
"""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.internet import reactor
from twisted.web import http

from gateway_project import edge  # never uvicorn: the process list names the server by its imports
from routing.core.body_progress import BodyProgress
from routing.core.errors import headers_too_large

log = logging.getLogger("switchboard.edge")

_channels: set[LimitedHTTPChannel] = set()  # open connections of this process
# connections waiting for a request head, the longest waiting first: the ones closed at the cap
_heads: dict[LimitedHTTPChannel, None] = {}
_cap_log = edge.CapLog()


class LimitedWebRequest(WebRequest):
    """daphne's request with its body bounded and kept in memory."""

    _refused = False
    _body_bytes = 0
    _limit = 0
    _path = "/"

    def gotLength(self, length: int | None) -> None:
        self._path = getattr(self.channel, "_path", b"/").split(b"?", 1)[0].decode("latin-1")
        self._limit = edge.body_limit(self._path)
        self.content = io.BytesIO()  # bounded by the limit: never a temporary file
        if length is not None and length > self._limit:
            self._refuse()

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(data)
        if self._body_bytes > self._limit:
            self._refuse()
            return
        self.channel.progress(len(data))
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self._refused:
            super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        self._refused = True
        self.content = io.BytesIO()
        self.channel.refuse(edge.too_large_response(self._limit, self._path))


class LimitedHTTPChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with the edge's head limits (431) and deadlines."""

    _refused = False
    _deadline = 0.0  # reactor time by which the head must be complete / the body progress; 0: none
    _idle = True  # between requests: the next bytes start a request head
    _progress: BodyProgress | None = None  # the body's, while it is read

    def connectionMade(self) -> None:
        super().connectionMade()
        lim = edge.limits()
        self._head_s, self._body_s, self._keepalive_s = lim.head_timeout_s, lim.body_timeout_s, lim.keepalive_s
        self._min_bytes = lim.body_min_bytes
        self.totalHeadersSize, self.maxHeaders = lim.max_header_bytes, lim.max_headers
        self.MAX_LENGTH = self.totalHeadersSize  # one line: LineReceiver's own limit
        self._deadline = reactor.seconds() + self._head_s  # a connection that sends nothing
        _channels.add(self)
        _heads[self] = None

    def connectionLost(self, reason: Any) -> None:
        _channels.discard(self)
        _heads.pop(self, None)
        super().connectionLost(reason)

    # deadlines --------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            return  # dropped, not buffered
        if self._idle:
            self._idle = False
            self._deadline = reactor.seconds() + self._head_s
            _heads.pop(self, None)
            _heads[self] = None  # the newest head now
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        self._progress = BodyProgress(self._body_s, self._min_bytes, reactor.seconds())
        self._deadline = self._progress.deadline
        _heads.pop(self, None)
        super().allHeadersReceived()

    def progress(self, size: int) -> None:
        """`size` bytes of the body arrived: the deadline moves once enough more have (routing.core.body_progress)."""
        progress = self._progress
        if progress is not None and progress.fed(size, reactor.seconds()):
            self._deadline = progress.deadline

    def allContentReceived(self) -> None:
        self._progress = None
        self._deadline = 0.0  # the application has the request; what it takes is its business
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        self._idle = True
        self._deadline = reactor.seconds() + self._keepalive_s
        _heads[self] = None  # kept alive, waiting for its next head: closed first at the cap
        super().requestDone(request)

    def timed_out(self) -> bool:
        """Close now; True when it was a request body that came too slowly."""
        slow = self._progress is not None and not self._idle
        self._progress = None
        self._deadline = 0.0
        _heads.pop(self, None)
        _channels.discard(self)
        self.transport.abortConnection()
        return slow

    # head limits ------------------------------------------------------------------------

    def lineReceived(self, line: bytes) -> None:
        if self._refused:
            return
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._head_too_large()
            return
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        self._head_too_large()

    def headerReceived(self, line: bytes) -> bool:
        if self._receivedHeaderCount >= self.maxHeaders:
            self._head_too_large()
            return False
        return super().headerReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if not self._refused:
            super().rawDataReceived(data)

    def _head_too_large(self) -> None:
        log.warning("request head over %d bytes / %d headers: answered 431", self.totalHeadersSize, self.maxHeaders)
        body = headers_too_large(self.totalHeadersSize, self.maxHeaders).body()
        head = (
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.refuse(head.encode("latin-1") + body)

    def refuse(self, answer: bytes) -> None:
        """Send `answer`, then read and drop what the client still sends for LINGER_S (so it
        reads the answer: closing on unread data would reset the connection under it) and close."""
        if self._refused:
            return
        self._refused = True
        self._deadline = 0.0
        transport = self.transport
        transport.write(answer)
        try:
            transport.loseWriteConnection()
        except AttributeError:  # not a TCP transport (TLS wrapper): close after the answer
            transport.loseConnection()
            return
        reactor.callLater(edge.LINGER_S, transport.abortConnection)


def _limited_channel_protocol(factory: Any) -> Any:
    return http._GenericHTTPChannelProtocol(LimitedHTTPChannel())


class LimitedHTTPFactory(HTTPFactory):
    """daphne's factory building limited channels, refusing connections past the cap."""

    protocol = _limited_channel_protocol

    def __init__(self, server: Any) -> None:
        super().__init__(server)
        self.timeOut = None  # Twisted's idle timer (reset on every read) is replaced by the deadlines
        self._cap = edge.limits().max_connections
        self._slow = edge.SlowBodyLog()
        reactor.callLater(1.0, self._sweep)

    def buildProtocol(self, addr: Any) -> Any:
        if len(_channels) >= self._cap:
            # at the cap the connection that waited longest for its head makes room (a flood of
            # half-open connections churns itself, /health still gets in); when every connection
            # is serving a request the new one is closed (None: Twisted closes the socket at once)
            _cap_log.full(self._cap)
            victim = next(iter(_heads), None)
            if victim is None:
                return None
            victim.timed_out()
        else:
            _cap_log.below()
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = LimitedWebRequest
        return protocol

    def _sweep(self) -> None:
        now = reactor.seconds()
        for channel in list(_channels):
            transport = channel.transport
            if not isinstance(getattr(transport, "protocol", None), http._GenericHTTPChannelProtocol):
                _channels.discard(channel)  # upgraded to a websocket: daphne's websocket protocol owns it
                _heads.pop(channel, None)
            elif channel._deadline and now > channel._deadline and channel.timed_out():
                self._slow.closed += 1
        self._slow.swept()
        reactor.callLater(min(1.0, edge.limits().head_timeout_s / 4), self._sweep)


def with_backlog(endpoint: str) -> str:
    """A Twisted server endpoint string listening with edge.LISTEN_BACKLOG, unless it names one
    (or is not a listening socket it opens: `fd:` sockets were listened on by their owner)."""
    kind = endpoint.split(":", 1)[0]
    if kind not in ("tcp", "tcp6", "unix") or ":backlog=" in endpoint:
        return endpoint
    return f"{endpoint}:backlog={edge.LISTEN_BACKLOG}"


class LimitedServer(daphne_server.Server):
    def run(self) -> None:
        daphne_server.HTTPFactory = LimitedHTTPFactory  # what Server.run builds its factory from
        self.endpoints = [with_backlog(e) for e in self.endpoints]
        super().run()

    def kill_all_applications(self) -> None:
        # a connection whose request never reached the application (a head still arriving, a
        # refused body) has no application instance: daphne's own loop fails on it at shutdown
        for protocol, details in list(self.connections.items()):
            if "application_instance" not in details:
                del self.connections[protocol]
        super().kill_all_applications()


class LimitedCommandLineInterface(CommandLineInterface):
    server_class = LimitedServer


if __name__ == "__main__":
    LimitedCommandLineInterface().run(sys.argv[1:])
