"""A tiny TCP proxy that a test can cut and restore, to take a server "down" for real.

`TcpProxy(5432)` listens on 127.0.0.1:<free port> and forwards every connection to
127.0.0.1:5432. `cut()` closes the listening socket (new connections are refused)
and every connection in flight; `restore()` listens on the same port again.
Threads only: one accept thread per listening period, two pump threads per link.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlparse

from tests.e2e.harness import free_port


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._links: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.restore()

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def restore(self) -> None:
        """Accept connections again (on the same port)."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            listener.settimeout(0.2)  # the accept loop notices a cut within 0.2 s at worst
            self._listener = listener
            self._start(self._accept_loop, listener)

    def cut(self) -> None:
        """Refuse new connections and drop every open one, like a database host going away."""
        with self._lock:
            listener, self._listener = self._listener, None
            links, self._links = self._links, set()
        if listener is not None:
            _close(listener)
        for sock in links:
            _close(sock)

    def refuse_new(self) -> None:
        """Refuse new connections but keep the open ones: requests already in flight finish."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)

    def stop(self) -> None:
        self.cut()
        for thread in self._threads:
            thread.join(timeout=2)

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="tcp-proxy")
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            with self._lock:
                if self._listener is not listener:
                    return
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut while this one was being connected
                    _close(client)
                    _close(upstream)
                    return
                self._links.update((client, upstream))
            self._start(self._pump, client, upstream)
            self._start(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._links.discard(source)
                self._links.discard(sink)
            _close(source)
            _close(sink)


def redis_behind_proxy(redis_url: str) -> tuple[TcpProxy, str]:
    """A proxy in front of the test Redis (the redis_url fixture), and the REDIS_URL that goes through it
    (cut it for an outage)."""
    target = urlparse(redis_url)
    proxy = TcpProxy(target.port or 6379, target.hostname or "127.0.0.1")
    return proxy, target._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
