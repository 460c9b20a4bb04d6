"""A huge request head is answered 431 at once and never stalls other requests.

Always against a real uvicorn + httptools process (the default run command),
whichever server the rest of the e2e pass uses: httptools has no limit of its own.
daphne gets the same limits through gateway_project/daphne_limits.py (tests/e2e/test_server_edge.py).
"""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path

import httpx
import orjson

from tests.e2e.harness import Gateway

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


def _send_huge_head(port: int, size: int) -> bytes:
    """Send a request whose one header is `size` bytes; return what the server answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        chunk = b"a" * 65536
        try:
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
            sock.sendall(b"\r\n\r\n")
        except OSError:  # the server closed after answering: read what it said
            pass
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            answer += data
        return answer


def test_a_1_mib_header_gets_431_while_health_keeps_answering(databases):
    gw = Gateway(
        database_url=databases.new(),
        config_yaml=CONFIG,
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        server="uvicorn",
    )
    gw.start()
    try:
        answers: list[bytes] = []
        senders = [
            threading.Thread(target=lambda: answers.append(_send_huge_head(gw.port, 1024 * 1024))) for _ in range(3)
        ]
        for sender in senders:
            sender.start()
        with httpx.Client(base_url=gw.url, timeout=10) as client:
            health = [client.get("/health").status_code for _ in range(20)]  # while the huge heads arrive
        for sender in senders:
            sender.join(timeout=20)
        assert len(answers) == 3
        for answer in answers:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 431"), answer[:200]
            assert orjson.loads(body)["error"]["code"] == "headers_too_large"
        assert health and set(health) == {200}
        # a normal request on a new connection still works, and so do many small headers under the limit
        ok = httpx.get(f"{gw.url}/health", headers={f"x-h{i}": "v" * 100 for i in range(50)}, timeout=10)
        assert ok.status_code == 200
        too_many = httpx.get(f"{gw.url}/health", headers={f"x-h{i}": "v" for i in range(150)}, timeout=10)
        assert too_many.status_code == 431
    finally:
        gw.stop()
