"""`manage.py serve --workers 2` (docs/scale-out.md): two worker processes on one port, one /metrics view.

Each keep-alive connection stays with the worker that accepted it, and /health names that
worker (X-Switchboard-Worker: pid), so the test opens connections until it holds one to
each worker, sends a different number of requests through each, and reads /metrics
through both: each must show the machine's sum, not its own share.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import Gateway

CONFIG = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: w-chat
    provider: mock
    upstream_model: workers-chat
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


def requests_total(text: str, model: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "switchboard_requests_total" and s.labels.get("model") == model
    )


def connection_per_worker(gw: Gateway, workers: int, within_s: float = 90.0) -> dict[int, httpx.Client]:
    """Keep-alive clients, one per distinct worker pid (as /health reports it).

    The serve harness returns once the port listens, i.e. once the first worker is up; the second may
    still be booting (Django, the snapshot). On a quiet machine it answers within a second; the bound
    only turns a worker that never starts into a failure, so it is generous for a machine at load 10."""
    clients: dict[int, httpx.Client] = {}
    deadline = time.monotonic() + within_s
    while len(clients) < workers:
        assert time.monotonic() < deadline, f"only workers {sorted(clients)} answered within {within_s}s"
        client = httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=10)
        pid = int(client.get("/health").headers["x-switchboard-worker"])
        if pid in clients:
            client.close()
        else:
            clients[pid] = client
    return clients


def same_worker(client: httpx.Client, pid: int) -> None:
    assert int(client.get("/health").headers["x-switchboard-worker"]) == pid, "the connection changed worker"


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_two_workers_share_a_port_and_each_metrics_page_sums_both(server, databases, mock_upstream):
    gw = Gateway(
        databases.new(),
        CONFIG.format(mock=mock_upstream.url),
        Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        {"SWITCHBOARD_METRICS_PUBLIC": "true"},
    )
    gw.import_config(gw.config_yaml)
    gw.api_key = gw.create_key("acme", "bot")
    gw.serve([sys.executable, "manage.py", "serve", "--server", server, "--workers", "2", "--host", "127.0.0.1"])
    clients: dict[int, httpx.Client] = {}
    try:
        clients = connection_per_worker(gw, 2)
        assert gw.process.pid not in clients  # the workers are children of `serve`
        body = {"model": "w-chat", "messages": [{"role": "user", "content": "hi"}]}
        (pid_a, a), (pid_b, b) = sorted(clients.items())
        for client, n in ((a, 3), (b, 5)):
            for _ in range(n):
                assert client.post("/v1/chat/completions", json=body).status_code == 200
        same_worker(a, pid_a)
        same_worker(b, pid_b)
        for client in (a, b):
            page = client.get("/metrics")
            assert page.status_code == 200
            assert requests_total(page.text, "w-chat") == 8, page.text[:2000]
            circuit = [line for line in page.text.splitlines() if line.startswith("switchboard_circuit_state{")]
            assert circuit == ['switchboard_circuit_state{model="w-chat",provider="mock"} 0.0'], circuit
    finally:
        for client in clients.values():
            client.close()
        gw.process.send_signal(signal.SIGTERM)
        assert gw.process.wait(timeout=20) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
        gw.log.close()
    log = gw.logs()
    assert "Traceback" not in log, log[-3000:]


def _serve(databases, mock_upstream, *args: str) -> Gateway:
    gw = Gateway(
        databases.new(),
        CONFIG.format(mock=mock_upstream.url),
        Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        {"SWITCHBOARD_METRICS_PUBLIC": "true"},
    )
    gw.import_config(gw.config_yaml)
    gw.api_key = gw.create_key("acme", "bot")
    gw.serve([sys.executable, "manage.py", "serve", *args, "--host", "127.0.0.1"])
    return gw


def test_one_worker_is_the_server_process_itself(databases, mock_upstream):
    gw = _serve(databases, mock_upstream)  # default: --workers 1, uvicorn
    try:
        assert int(httpx.get(f"{gw.url}/health").headers["x-switchboard-worker"]) == gw.process.pid
        page = httpx.get(f"{gw.url}/metrics")
        assert page.status_code == 200 and "switchboard_requests_total" in page.text
    finally:
        gw.stop()


def test_a_daphne_worker_that_dies_is_replaced_and_its_requests_still_count(databases, mock_upstream):
    gw = _serve(databases, mock_upstream, "--server", "daphne", "--workers", "2")
    clients: dict[int, httpx.Client] = {}
    try:
        clients = connection_per_worker(gw, 2)
        victim, client = sorted(clients.items())[0]
        body = {"model": "w-chat", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(4):
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        client.close()
        del clients[victim]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90  # a replacement boots as the first did (see connection_per_worker)
        while True:  # a new worker answers next to the survivor
            for c in clients.values():
                c.close()
            clients = connection_per_worker(gw, 2)
            if victim not in clients:
                break
            assert time.monotonic() < deadline
        assert gw.process.poll() is None
        for c in clients.values():
            assert requests_total(c.get("/metrics").text, "w-chat") == 4  # the dead worker's count is kept
        assert "exited with -9; restarting" in gw.logs()
    finally:
        for c in clients.values():
            c.close()
        gw.stop()


def test_serve_refuses_a_worker_count_below_one():
    from tests.e2e.harness import manage

    result = manage(["serve", "--workers", "0"], {}, check=False)
    assert result.returncode == 1 and "--workers must be between 1 and 256" in result.stderr


def test_serve_refuses_the_development_secret_key_saying_what_to_set():
    from tests.e2e.harness import manage

    result = manage(["serve"], {"SECRET_KEY": "dev-insecure-switchboard-key-change-me", "DEBUG": "false"}, check=False)
    assert result.returncode == 1
    assert "SECRET_KEY is the development key" in result.stderr and "export SECRET_KEY=" in result.stderr
    assert "Serving the gateway" not in result.stdout


def test_the_secret_key_rule_lets_development_and_real_keys_through():
    from django.core.management.base import CommandError

    from routing.management.commands.serve import refuse_insecure_secret_key

    refuse_insecure_secret_key("dev-insecure-switchboard-key-change-me", debug=True)  # development
    refuse_insecure_secret_key("k" * 20 + "Zq8vN2xW4yR7tP1sL9mB", debug=False)  # 40 characters
    for weak in ("short", "django-insecure-" + "x" * 40):
        with pytest.raises(CommandError):
            refuse_insecure_secret_key(weak, debug=False)


def test_serve_on_every_address_with_loopback_only_hosts_refuses_saying_what_to_set():
    """Before: --host 0.0.0.0 with the default ALLOWED_HOSTS served, /v1/models answered 200 and
    /admin/login/ answered 400 to every real host name."""
    from tests.e2e.harness import SECRET_KEY, manage

    env = {"SECRET_KEY": SECRET_KEY, "DEBUG": "false", "ALLOWED_HOSTS": "127.0.0.1,localhost,[::1],testserver"}
    result = manage(["serve", "--host", "0.0.0.0", "--port", "0"], env, check=False)
    assert result.returncode == 1, result.stdout
    assert "ALLOWED_HOSTS names only loopback" in result.stderr and "CSRF_TRUSTED_ORIGINS" in result.stderr
    assert "Serving the gateway" not in result.stdout


def test_the_hosts_rule_lets_loopback_named_hosts_and_development_through():
    from django.core.management.base import CommandError

    from routing.management.commands.serve import refuse_loopback_only_hosts

    default = ["127.0.0.1", "localhost", "[::1]", "testserver"]
    refuse_loopback_only_hosts("127.0.0.1", default, debug=False)  # this machine only
    refuse_loopback_only_hosts("0.0.0.0", ["gateway.example.com"], debug=False)
    refuse_loopback_only_hosts("0.0.0.0", ["*"], debug=False)
    refuse_loopback_only_hosts("::", default, debug=True)
    for host in ("0.0.0.0", "::", "10.0.0.5"):
        with pytest.raises(CommandError, match="ALLOWED_HOSTS=gateway.example.com"):
            refuse_loopback_only_hosts(host, default, debug=False)
