"""Idempotency across processes: two real gateway servers on one database and a real Redis.

A request with an Idempotency-Key served by process A is replayed by process B (the
same answer, byte for byte, marked as a replay) with no second upstream call. Needs
a Redis (the redis_url fixture: the environment's, else a throwaway redis-server; without
one each process would only know its own answers).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from routing.runtime.cluster.idempotency import IdempotencyStore
from tests.e2e.harness import SLACK_S, Gateway

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: idem-chat
    provider: mock
    upstream_model: idem-x-chat
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


@pytest.fixture(scope="module")
def two_processes(make_gateway, mock_upstream, redis_url):
    config = CONFIG.format(mock=mock_upstream.url)
    shared = {"REDIS_URL": redis_url}  # both servers share answers through this Redis
    a = make_gateway(config, env=shared)
    b = Gateway(
        database_url=a.database_url,
        config_yaml=config,
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-b-")),
        extra_env=shared,
    )
    b.start()
    yield a, b
    b.stop()


def _post(gw: Gateway, idempotency_key: str, content: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}", "Idempotency-Key": idempotency_key},
        json={"model": "idem-chat", "messages": [{"role": "user", "content": content}]},
        timeout=20,
    )


def _wait_until_shared(redis_url: str, idempotency_key: str) -> None:
    """A writes the answer to Redis just after answering (off the request path); wait for it."""
    import redis

    name = IdempotencyStore()._redis_key(("acme", idempotency_key))
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 1.0 + SLACK_S
        while not client.exists(name):
            assert time.monotonic() < deadline, "process A never shared its answer through Redis"
            time.sleep(0.01)
    finally:
        client.close()


def test_a_duplicate_sent_to_another_process_replays_the_first_answer(two_processes, mock_upstream):
    a, b = two_processes
    assert a.process.pid != b.process.pid and a.port != b.port
    key = f"idem-{uuid.uuid4().hex}"
    before = mock_upstream.count("idem-x-chat")
    first = _post(a, key, "only once, please")
    assert first.status_code == 200, first.text
    assert "idempotent-replayed" not in first.headers
    _wait_until_shared(a.env["REDIS_URL"], key)
    duplicate = _post(b, key, "only once, please")
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.headers["idempotent-replayed"] == "true"
    assert duplicate.content == first.content
    assert mock_upstream.count("idem-x-chat") == before + 1


def test_a_different_body_under_the_same_key_is_refused_by_the_other_process(two_processes, mock_upstream):
    a, b = two_processes
    key = f"idem-{uuid.uuid4().hex}"
    assert _post(a, key, "first body").status_code == 200
    _wait_until_shared(a.env["REDIS_URL"], key)
    before = mock_upstream.count("idem-x-chat")
    conflict = _post(b, key, "another body")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_key_reused"
    assert mock_upstream.count("idem-x-chat") == before
