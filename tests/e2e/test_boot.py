"""A server refuses to start on an invalid configuration (and says where the fault is)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from gateway_project.servers import command
from tests.e2e.harness import ROOT, SERVER, Gateway, free_port

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: http://127.0.0.1:9/v1
models:
  - id: chat-a
    provider: mock
    upstream_model: up-chat-a
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def test_a_server_on_an_invalid_configuration_exits_non_zero_naming_the_field_and_never_listens(databases):
    gateway = Gateway(
        database_url=databases.new(), config_yaml=CONFIG, workdir=Path(tempfile.mkdtemp(prefix="switchboard-boot-"))
    )
    gateway.import_config(CONFIG)
    # An edit that bypassed validation (a raw SQL fix, an old release's row): the database now
    # holds a configuration the gateway must not serve.
    gateway.manage(
        "shell",
        "-c",
        "from providers.models import Model; Model.objects.filter(public_id='chat-a').update(connect_timeout_ms=0)",
    )
    port = free_port()
    log_path = gateway.workdir / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command(SERVER, "127.0.0.1", port),
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **gateway.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        listened = False
        deadline = time.monotonic() + 60
        try:
            while process.poll() is None and time.monotonic() < deadline:
                with socket.socket() as sock:
                    listened = sock.connect_ex(("127.0.0.1", port)) == 0
                if listened:
                    break
                time.sleep(0.02)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log_path.read_text()
    assert process.returncode not in (0, None, -9), f"the server kept running or exited 0:\n{output}"
    assert not listened, f"the server listened on {port} with an invalid configuration:\n{output}"
    assert "models[chat-a].connect_timeout_ms" in output, output
    assert "positive whole number" in output, output
