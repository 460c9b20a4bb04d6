"""Three gateway replicas behind a real HAProxy, on one PostgreSQL and one Redis (docs/scale-out.md#cluster).

The replicas are real server processes (daphne or uvicorn, as the rest of tests/e2e),
each on its own loopback port; HAProxy runs with the configuration `make cluster`
writes (tools.local_cluster.haproxy_config), health-checking /health. Through the
balancer:

- requests reach every replica (each answer names its replica: X-Switchboard-Replica);
- `import_config` against the shared database reaches every replica within the reload bound;
- an idempotent request replayed by a *different* replica (Idempotent-Replayed: true,
  one upstream call);
- a replica killed with SIGKILL: HAProxy routes around it (0 failed requests) and the
  dashboard's process list marks it stale; restarted, it is back in rotation and listed.

Needs PostgreSQL and Redis: the postgres_url / redis_url fixtures (the environment's servers,
else throwaway ones; the test makes its own database) and haproxy.
HAProxy comes from Debian (`apt-get install haproxy`; .ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gateway_project.servers import command
from routing.runtime.cluster.idempotency import IdempotencyStore
from routing.runtime.cluster.process_list import STALE_BEATS
from tests.e2e.harness import ROOT, SERVER, SLACK_S, Gateway, free_port, manage, migrated_postgres, wait_for_port
from tools.local_cluster import haproxy_config

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)

pytestmark = pytest.mark.skipif(not HAPROXY, reason="cluster NOT tested: needs haproxy (apt-get install haproxy)")

HEARTBEAT_S = 0.2
REPLICAS = ("replica1", "replica2", "replica3")
PASSWORD = "cluster-e2e-password"

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: cl-chat
    provider: mock
    upstream_model: cluster-chat
    capabilities: [chat, streaming]
{extra}
orgs:
  - name: acme
    agents:
      - name: bot
"""


def wait_for(condition: Callable[[], object], within_s: float, what: str) -> float:
    """Poll `condition` until it holds; seconds waited (bounded: fails after `within_s`)."""
    start = time.monotonic()
    while not condition():
        waited = time.monotonic() - start
        assert waited < within_s, f"{what}: not within {waited:.1f} s"
        time.sleep(0.05)
    return time.monotonic() - start


class Replica:
    """One gateway server process on a fixed port (so HAProxy's configuration names it)."""

    def __init__(self, name: str, gw: Gateway) -> None:
        self.name, self.gw, self.port = name, gw, free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.log = open(self.gw.workdir / f"{self.name}.log", "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            command(SERVER, "127.0.0.1", self.port),
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", **self.gw.env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.process, timeout=60)

    @property
    def process_id(self) -> str:
        """Its id in the dashboard's process list."""
        import socket

        return f"{socket.gethostname()}:{self.process.pid}"

    def stop(self, signum: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class Cluster:
    def __init__(self, database_url: str, mock_url: str, redis_url: str) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="switchboard-cluster-"))
        env = {
            "REDIS_URL": redis_url,
            "SWITCHBOARD_HEARTBEAT_S": str(HEARTBEAT_S),
            "SECRET_KEY": "cluster-e2e-" + uuid.uuid4().hex,  # one key: a session works on every replica
        }
        self.config = CONFIG.format(mock=mock_url, extra="")
        self.mock_url = mock_url
        self.gw = Gateway(database_url, self.config, self.workdir, extra_env=env)
        self.gw.import_config(self.config)
        self.api_key = self.gw.create_key("acme", "bot")
        manage(
            ["createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"],
            {**self.gw.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        )
        self.replicas = {name: Replica(name, self.gw) for name in REPLICAS}
        self.haproxy: subprocess.Popen | None = None
        self.staff = httpx.Client(timeout=10)
        try:
            self._start()
        except BaseException:
            self.stop()  # leave no replica or HAProxy behind
            raise

    def _start(self) -> None:
        for replica in self.replicas.values():
            replica.start()
        self.port = free_port()
        cfg = self.workdir / "haproxy.cfg"
        backends = [(name, r.port) for name, r in self.replicas.items()]
        cfg.write_text(haproxy_config(self.port, backends, check_interval_ms=200))
        self.haproxy_log = open(self.workdir / "haproxy.log", "w")  # noqa: SIM115
        self.haproxy = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(cfg)], stdout=self.haproxy_log, stderr=subprocess.STDOUT
        )
        wait_for_port(self.port, self.haproxy)
        self.url = f"http://127.0.0.1:{self.port}"
        self.staff.base_url = self.url
        wait_for(lambda: self.replicas_serving(6) == set(REPLICAS), 20 + SLACK_S, "every replica in rotation")
        self.sign_in()

    def sign_in(self) -> None:
        page = self.staff.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = self.staff.post(
            "/admin/login/",
            data={"username": "ops", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/dashboard/"},
            headers={"Referer": f"{self.url}/admin/login/"},
        )
        assert answer.status_code == 302 and answer.headers["location"] == "/dashboard/", answer.text[:500]

    def chat(self, client: httpx.Client, content: str = "hi", **headers: str) -> httpx.Response:
        return client.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {self.api_key}", **headers},
            json={"model": "cl-chat", "messages": [{"role": "user", "content": content}]},
        )

    def replicas_serving(self, requests: int) -> set[str]:
        """The replicas that answered `requests` /health requests through HAProxy."""
        seen = set()
        with httpx.Client(base_url=self.url, timeout=5) as client:
            for _ in range(requests):
                answer = client.get("/health")
                if answer.status_code == 200:
                    seen.add(answer.headers.get("x-switchboard-replica"))
        return seen

    def process_list(self) -> dict:
        answer = self.staff.get("/dashboard/processes/")
        assert answer.status_code == 200, answer.text[:500]
        return answer.json()

    def states(self) -> dict[str, str]:
        return {p["id"]: p["state"] for p in self.process_list()["processes"]}

    def stop(self) -> None:
        self.staff.close()
        if self.haproxy is not None:
            if self.haproxy.poll() is None:
                self.haproxy.terminate()
                self.haproxy.wait(timeout=10)
            self.haproxy_log.close()
        for replica in self.replicas.values():
            replica.stop()


@pytest.fixture(scope="module")
def database_url(postgres_url) -> Iterator[str]:
    """A new, migrated PostgreSQL database shared by the replicas; dropped afterwards."""
    with migrated_postgres(postgres_url, "sb_e2e_cluster") as url:
        yield url


@pytest.fixture(scope="module")
def cluster(database_url, mock_upstream, redis_url) -> Iterator[Cluster]:
    started = Cluster(database_url, mock_upstream.url, redis_url)
    yield started
    started.stop()


def test_requests_through_haproxy_reach_every_replica_and_all_are_listed(cluster):
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        answers = [cluster.chat(client) for _ in range(9)]
    assert [a.status_code for a in answers] == [200] * 9
    assert {a.headers["x-switchboard-replica"] for a in answers} == set(REPLICAS)  # round robin
    ids = {r.process_id for r in cluster.replicas.values()}
    wait_for(lambda: ids <= {i for i, s in cluster.states().items() if s == "alive"}, 2 + SLACK_S, "all listed alive")
    assert cluster.process_list()["source"] == "redis"

    def counted() -> bool:  # each process reports what it served with its next heartbeat
        listed = {p["id"]: p for p in cluster.process_list()["processes"]}
        return sum(listed[i]["served"] for i in ids if i in listed) >= 9

    wait_for(counted, 2 + SLACK_S, "the 9 requests counted in the process list")
    listed = {p["id"]: p for p in cluster.process_list()["processes"]}
    assert {listed[i]["server"] for i in ids} == {SERVER}


def test_a_stream_passes_through_haproxy_whole(cluster):
    body = {"model": "cl-chat", "stream": True, "messages": [{"role": "user", "content": "stream it"}]}
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    with httpx.stream("POST", f"{cluster.url}/v1/chat/completions", json=body, headers=headers, timeout=20) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 2 and events[-1] == "data: [DONE]"


def test_import_config_reaches_every_replica_within_the_reload_bound(cluster):
    model = f"cl-new-{uuid.uuid4().hex[:6]}"
    extra = f"  - id: {model}\n    provider: mock\n    upstream_model: cluster-chat\n    capabilities: [chat]"
    cluster.gw.import_config(CONFIG.format(mock=cluster.mock_url, extra=extra))
    saved_at = time.monotonic()
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    for replica in cluster.replicas.values():

        def serves(port: int = replica.port) -> bool:
            listed = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=5).json()
            return model in {m["id"] for m in listed["data"]}

        wait_for(serves, 1.0 + SLACK_S - (time.monotonic() - saved_at), f"{replica.name} serving {model}")
    # ... and the process list shows every replica on the same (new) configuration version
    ids = {r.process_id for r in cluster.replicas.values()}

    def same_version() -> bool:
        listed = {p["id"]: p for p in cluster.process_list()["processes"]}
        return len({listed[i]["version"] for i in ids if i in listed}) == 1 and not any(
            listed[i]["version_mismatch"] for i in ids if i in listed
        )

    wait_for(same_version, 2 + SLACK_S, "every replica listed on one version")


def test_an_idempotent_request_is_replayed_by_another_replica(cluster, mock_upstream):
    key = f"cl-idem-{uuid.uuid4().hex}"
    before = mock_upstream.count("cluster-chat")
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        first = cluster.chat(client, "once", **{"Idempotency-Key": key})
        assert first.status_code == 200 and "idempotent-replayed" not in first.headers
        served_by = first.headers["x-switchboard-replica"]
        import redis

        shared = redis.Redis.from_url(cluster.gw.env["REDIS_URL"])
        try:  # the answer reaches Redis just after it was sent (off the request path)
            name = IdempotencyStore()._redis_key(("acme", key))
            wait_for(lambda: shared.exists(name), 1 + SLACK_S, "the answer shared through Redis")
        finally:
            shared.close()
        for _ in range(len(REPLICAS) * 2):  # round robin: another replica within a few requests
            duplicate = cluster.chat(client, "once", **{"Idempotency-Key": key})
            assert duplicate.status_code == 200 and duplicate.headers["idempotent-replayed"] == "true"
            assert duplicate.content == first.content
            if duplicate.headers["x-switchboard-replica"] != served_by:
                break
        else:
            pytest.fail(f"every duplicate went to {served_by}")
    assert mock_upstream.count("cluster-chat") == before + 1


def test_a_killed_replica_is_routed_around_and_listed_stale_then_rejoins(cluster):
    victim = cluster.replicas["replica3"]
    dead_id = victim.process_id
    others = {r.process_id for n, r in cluster.replicas.items() if n != "replica3"}
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(timeout=10)
    with httpx.Client(base_url=cluster.url, timeout=20) as client:
        answers = [cluster.chat(client, f"after the kill {i}") for i in range(30)]
    assert [a.status_code for a in answers] == [200] * 30  # refused connections are re-sent elsewhere
    assert {a.headers["x-switchboard-replica"] for a in answers} == {"replica1", "replica2"}

    def marked() -> bool:
        states = cluster.states()
        return states.get(dead_id) == "stale" and all(states.get(i) == "alive" for i in others)

    wait_for(marked, STALE_BEATS * HEARTBEAT_S + 1 + SLACK_S, "the killed replica listed stale, the others alive")

    victim.log.close()
    victim.start()  # same port: HAProxy's next good check puts it back
    wait_for(lambda: "replica3" in cluster.replicas_serving(6), 10 + SLACK_S, "replica3 back in rotation")
    wait_for(lambda: cluster.states().get(victim.process_id) == "alive", 2 + SLACK_S, "the new process listed alive")
