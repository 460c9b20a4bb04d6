"""The server edge on both servers (docs/security.md#server-edge): bodies refused while
they are read, slow clients cut off, a flood of connections that cannot take the process.

Each test runs against a real uvicorn (`manage.py serve`'s command) and a real daphne
(`python -m gateway_project.daphne_limits`), whichever server the rest of the e2e pass uses.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from gateway_project.edge import LINGER_S
from tests.e2e.harness import SLACK_S, Gateway

CONFIG = """
providers:
  - name: mock
    base_url: http://127.0.0.1:9/v1
models:
  - id: m
    provider: mock
    upstream_model: up
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

# short timeouts and a small connection cap, so the slow-client checks take seconds
TIMEOUT_S = 1.0
SLOW_ENV = {
    "SWITCHBOARD_HEAD_TIMEOUT_S": str(TIMEOUT_S),
    "SWITCHBOARD_BODY_TIMEOUT_S": str(TIMEOUT_S),
    "SWITCHBOARD_BODY_MIN_BYTES": "3",  # the slow body below brings 3 bytes a window: progress enough
    "SWITCHBOARD_KEEPALIVE_S": str(TIMEOUT_S),
    "SWITCHBOARD_MAX_CONNECTIONS": "200",
}
GIB = 1 << 30
CHUNK = b"x" * 65536
# new connections at once: more than Twisted's default listen backlog (50), within the kernel's cap
BURST = min(400, int(Path("/proc/sys/net/core/somaxconn").read_text()))


def _gateway(databases, server: str, env: dict[str, str]) -> Gateway:
    gw = Gateway(
        database_url=databases.new(),
        config_yaml=CONFIG,
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        extra_env=env,
        server=server,
    )
    gw.start()
    return gw


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def gateway(request, databases) -> Iterator[Gateway]:
    gw = _gateway(databases, request.param, SLOW_ENV)
    yield gw
    gw.stop()


def _proc(pid: int, name: str) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        key, _, value = line.partition(":")
        value = value.strip().split(" ")[0]
        if value.isdigit():
            fields[key] = int(value)
    return fields


def _upload(port: int, path: str, chunked: bool) -> tuple[bytes, float, int, bool]:
    """POST a 1 GiB body made by a generator (never held) to `path`: with `Content-Length`, or
    chunked, and keep sending after the answer until the server closes the connection (at most
    LINGER_S + SLACK_S; what arrives meanwhile is read and dropped). (answer, seconds to it,
    bytes sent before it, whether the server closed)."""
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {GIB}"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    piece = b"10000\r\n" + CHUNK + b"\r\n" if chunked else CHUNK
    body = (piece for _ in range(GIB // len(CHUNK)))
    stop = threading.Event()
    answered = threading.Event()
    sent = [0]
    cut = [False]  # the server closed the connection under the sender

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send() -> None:
        try:
            for part in body:
                if stop.is_set():
                    return
                sock.sendall(part)
                sent[0] += len(CHUNK)
                if answered.is_set():
                    time.sleep(0.001)  # after the answer, slower: the rest must outlast the server's linger
        except OSError:
            cut[0] = True  # the server closed after answering

    started = time.monotonic()
    sock.sendall(head.encode())
    sender = threading.Thread(target=send)
    sender.start()
    answer = b""
    try:
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < 100:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except OSError:
        pass
    elapsed, sent_before_answer = time.monotonic() - started, sent[0]
    answered.set()
    sender.join(timeout=LINGER_S + SLACK_S)  # the sender stops when the server closes
    closed = cut[0]
    stop.set()
    sender.join(timeout=10)
    sock.close()
    return answer, elapsed, sent_before_answer, closed


def _json_body(answer: bytes) -> dict:
    head, _, body = answer.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    return orjson.loads(body)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/admin/login/"])
def test_a_1_gib_unauthenticated_upload_is_refused_at_once(gateway, path, chunked):
    if chunked and path.startswith("/v1") and gateway.server == "uvicorn":
        # the gateway's own reader answers the missing key before reading a byte of a body
        # without a length; the connection then ends (a lingering close), nothing is read on
        answer, elapsed, sent, closed = _upload(gateway.port, path, chunked)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert closed, "the server went on reading the rest of the upload"
        return
    pid = gateway.process.pid
    memory, io = _proc(pid, "status"), _proc(pid, "io")
    answer, elapsed, sent, closed = _upload(gateway.port, path, chunked)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert closed, "the server went on reading the rest of the upload"
    assert b"connection: close" in answer.lower()
    assert _json_body(answer)["error"]["code"] == "request_too_large"
    assert elapsed < 1.0 + SLACK_S, f"413 after {elapsed:.1f} s"
    assert sent < GIB, "the whole body was read before the answer"
    after_memory, after_io = _proc(pid, "status"), _proc(pid, "io")
    peak_growth = after_memory["VmHWM"] - memory["VmHWM"]  # kB
    assert peak_growth <= 20 * 1024, f"the server's peak RSS grew by {peak_growth} kB"
    written = after_io["wchar"] - io["wchar"]
    assert written < 5 * 1024 * 1024, f"the server wrote {written} bytes (spooled the body?)"
    # the server still serves, and a body under the limit still gets through to Django
    assert httpx.get(f"{gateway.url}/health", timeout=10).status_code == 200
    small = httpx.post(f"{gateway.url}/admin/login/", content=b"a=b" * 1000, timeout=10)
    assert small.status_code == 403  # CSRF: the body was read and the view answered


def test_an_oversized_messages_body_is_refused_in_anthropics_error_shape(gateway):
    answer, _, _, closed = _upload(gateway.port, "/v1/messages", chunked=False)
    assert answer.startswith(b"HTTP/1.1 413") and closed
    body = _json_body(answer)
    assert body["type"] == "error" and "larger than 10485760 bytes" in body["error"]["message"]


def test_doubled_slashes_in_an_api_path_answer_the_apis_json_404(gateway):
    for path in ("//v1/chat/completions", "/v1//chat/completions"):
        answer = httpx.post(f"{gateway.url}{path}", json={"model": "m", "messages": []}, timeout=10)
        assert answer.status_code == 404, (path, answer.text[:200])
        assert answer.json()["error"]["code"] == "not_found"
        assert "/v1/chat/completions" in answer.json()["error"]["message"]


def test_an_oversized_request_head_gets_431(gateway):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n")
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert _json_body(answer)["error"]["code"] == "headers_too_large"


# --- slow clients -------------------------------------------------------------------------

HALF_OPEN = 300  # more than the cap


def _open_half(port: int, kind: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind == 1:  # a head that never ends
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    elif kind == 2:  # a body that never ends
        sock.sendall(b"POST /admin/login/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
    return sock  # kind 0: sends nothing


def _closed_within(socks: list[socket.socket], bound: float) -> tuple[int, float]:
    """Wait up to `bound` s for the server to close every socket: (how many it closed, when the last)."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    started, closed, last = time.monotonic(), 0, 0.0
    while closed < len(socks) and time.monotonic() - started < bound:
        for key, _ in selector.select(timeout=0.1):
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                closed += 1
                last = time.monotonic() - started
    selector.close()
    return closed, last


def test_half_open_connections_are_closed_and_health_keeps_answering(gateway):
    gw = gateway
    socks: list[socket.socket] = []
    try:
        socks = [_open_half(gw.port, i % 3) for i in range(HALF_OPEN)]
        opened = time.monotonic()
        # past the cap, the connections that waited longest for their head make room: /health gets in
        with httpx.Client(base_url=gw.url, timeout=5) as client:
            health = [client.get("/health").status_code for _ in range(20)]
        assert health == [200] * 20
        # every half-open connection is closed within the head / body timeout (+ the sweep)
        closed, last = _closed_within(socks, TIMEOUT_S + 1.0 + SLACK_S)
        waited = time.monotonic() - opened
        assert closed == HALF_OPEN, f"{HALF_OPEN - closed} half-open connections still open after {waited:.1f} s"
        # an idle keep-alive connection is closed after the keep-alive timeout
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            assert _closed_within([sock], TIMEOUT_S + 1.0 + SLACK_S)[0] == 1
        # a body that keeps making progress is not cut, however long it takes in all
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12\r\n\r\n")
            for _ in range(4):
                time.sleep(TIMEOUT_S * 0.6)
                sock.sendall(b"abc")
            assert sock.recv(65536).startswith(b"HTTP/1.1 403")  # CSRF: the view answered
        assert "Traceback" not in gw.logs()
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_at_the_cap_idle_keep_alive_connections_make_room_for_new_ones(databases, server):
    gw = _gateway(databases, server, {"SWITCHBOARD_KEEPALIVE_S": "60", "SWITCHBOARD_MAX_CONNECTIONS": "40"})
    idle: list[socket.socket] = []
    try:
        for _ in range(60):  # more kept-alive connections than the cap, each idle after one answer
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "a new connection was refused at the cap"
            idle.append(sock)
        closed, _ = _closed_within(idle[:20], SLACK_S)
        assert closed == 20  # the longest idle made room
    finally:
        for sock in idle:
            sock.close()
        gw.stop()


def _connected_while_paused(port: int, n: int, pid: int) -> int:
    """How many of `n` new connections complete their handshake while the server process is
    paused (SIGSTOP, as a busy process that cannot accept for a moment): those the kernel
    queues for it. Past the queue a connect waits for a SYN retry a second later, or is reset."""
    socks = [socket.socket() for _ in range(n)]
    os.kill(pid, signal.SIGSTOP)
    try:
        with selectors.DefaultSelector() as sel:
            for sock in socks:
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", port))
                sel.register(sock, selectors.EVENT_WRITE)
            connected, deadline = 0, time.monotonic() + 0.5  # within the first SYN retry (1 s)
            while connected < n and (left := deadline - time.monotonic()) > 0:
                for key, _ in sel.select(left):
                    sel.unregister(key.fileobj)
                    connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        return connected
    finally:
        os.kill(pid, signal.SIGCONT)
        for sock in socks:
            sock.close()


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_a_burst_of_new_connections_to_a_busy_process_is_queued_in_full(databases, server):
    # daphne listened with Twisted's backlog of 50: in a burst of a few hundred connections the
    # kernel dropped the rest, and reset some mid-request (docs/security.md#server-edge)
    gw = _gateway(databases, server, {})
    try:
        assert _connected_while_paused(gw.port, BURST, gw.process.pid) == BURST
        assert httpx.get(f"{gw.url}/health", timeout=10).status_code == 200
    finally:
        gw.stop()
