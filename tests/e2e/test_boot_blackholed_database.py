"""A database host that accepts connections and never answers cannot hold the boot.

Without a connect timeout libpq waits for the operating system: /health first answered
after more than two minutes while nothing listened. With `connect_timeout`
(SWITCHBOARD_DB_CONNECT_TIMEOUT_S, docs/security.md#server-edge) the boot gives up on the
database and serves the last good configuration within seconds.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.e2e.harness import SLACK_S, Gateway, manage

CONFIG = """
providers:
  - name: mock
    base_url: http://127.0.0.1:9/v1
models:
  - id: m-kept
    provider: mock
    upstream_model: up
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


class Blackhole:
    """A TCP server on loopback that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted_at: list[float] = []  # time.monotonic() of each connection
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted_at.append(time.monotonic())
            self.held.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def test_boot_against_a_blackholed_postgresql_serves_the_last_good_configuration_after_one_connect_timeout():
    work = Path(tempfile.mkdtemp(prefix="switchboard-blackhole-"))
    url = f"sqlite:///{work / 'gw.sqlite3'}"
    manage(["migrate", "-v0"], {"DATABASE_URL": url})
    gw = Gateway(database_url=url, config_yaml=CONFIG, workdir=work)
    gw.start()  # a good start writes the last good configuration beside the usage spool
    key = gw.api_key
    gw.stop()
    assert (work / "spool" / "last-good-config.json").exists()

    hole = Blackhole()
    gw.database_url = f"postgres://switchboard:switchboard@127.0.0.1:{hole.port}/switchboard"
    try:
        gw.serve()  # returns once /health answered (raises when nothing listens within 20 s)
        serving = time.monotonic()
        models = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == ["m-kept"]
        assert hole.accepted_at, "the boot never tried the database"
        # from its first try of the database, the boot waited one connect timeout (3 s), then served;
        # the rest of the 10 s is the process's own start (imports), which this machine's load stretches
        waited = serving - hole.accepted_at[0]
        assert waited <= 3 + SLACK_S, f"serving {waited:.1f} s after the boot first tried the database"
        assert "last good configuration" in gw.logs()
    finally:
        gw.stop()
        hole.close()
