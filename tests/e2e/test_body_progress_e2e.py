"""Bodies trickled a byte at a time are cut on both servers (docs/security.md#server-edge): a body must
bring SWITCHBOARD_BODY_MIN_BYTES more in every SWITCHBOARD_BODY_TIMEOUT_S window, not just any byte, and
/health answers throughout."""

from __future__ import annotations

import selectors
import socket
import tempfile
import time
from pathlib import Path

import httpx
import pytest

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
WINDOW_S = 2.0
TRICKLERS = 2000
EVERY_S = 1.0  # one byte a second: under the old rule (any byte is progress) never cut


@pytest.fixture(params=["uvicorn", "daphne"])
def gateway(request, databases):
    gw = Gateway(
        database_url=databases.new(),
        config_yaml=CONFIG,
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        extra_env={"SWITCHBOARD_BODY_TIMEOUT_S": str(WINDOW_S), "SWITCHBOARD_BODY_MIN_BYTES": "1024"},
        server=request.param,
    )
    gw.start()
    yield gw
    gw.stop()


def _trickler(port: int, key: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    sock.sendall(head.encode())
    sock.setblocking(False)
    return sock


def test_two_thousand_trickled_bodies_are_cut_within_the_window_and_health_answers(gateway):
    gw = gateway
    opened: dict[socket.socket, float] = {}
    selector = selectors.DefaultSelector()
    try:
        for _ in range(TRICKLERS):
            sock = _trickler(gw.port, gw.api_key)
            opened[sock] = time.monotonic()
            selector.register(sock, selectors.EVENT_READ)
        lived: list[float] = []
        answers: dict[bytes, int] = {}
        health: list[int] = []
        next_byte = time.monotonic() + EVERY_S
        bound = WINDOW_S + 1.0 + SLACK_S  # the window, the sweep (at most a second late), the machine
        with httpx.Client(base_url=gw.url, timeout=5) as client:
            while opened and time.monotonic() - min(opened.values()) < bound + EVERY_S:
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if data:  # an answer before the close (the 408 on uvicorn): read on to the close
                        status = data[9:12]
                        answers[status] = answers.get(status, 0) + 1
                        continue
                    selector.unregister(sock)
                    lived.append(time.monotonic() - opened.pop(sock))
                    sock.close()
                now = time.monotonic()
                if now >= next_byte:  # a byte on every connection still open
                    for sock in list(opened):
                        try:
                            sock.send(b" ")
                        except OSError:
                            pass
                    next_byte = now + EVERY_S
                    health.append(client.get("/health").status_code)
        assert not opened, f"{len(opened)} trickling connections still open after {bound + EVERY_S:.1f} s"
        assert max(lived) <= bound, max(lived)
        assert min(lived) >= WINDOW_S - 0.1  # not before its window
        assert health and set(health) == {200}
        if gw.server == "uvicorn":  # the gateway's own reader answers; daphne reads bodies whole first
            assert set(answers) <= {b"408"}
        print(f"{gw.server}: {TRICKLERS} closed in {min(lived):.2f}-{max(lived):.2f} s, answers {answers}")
        assert "closed" in gw.logs() or answers  # said once per sweep (or per request with the 408)
    finally:
        for sock in opened:
            sock.close()
        selector.close()
