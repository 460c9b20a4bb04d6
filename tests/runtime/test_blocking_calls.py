"""Upstreams' blocking calls on pools of their own (docs/security.md#blocking).

A Vertex AI token endpoint that accepts connections and never answers must not hold up the
process: a key revoked while requests to that provider keep failing is refused within a
second (the reload runs on the loop's default pool, which the exchanges no longer touch), the
clients learn nothing of the endpoint's address, and a failing endpoint charges the
provider's breaker like a connect failure.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from routing.config import live
from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.blocking import BlockingPool
from routing.upstream.dialects import vertex
from tests.inprocess import gateway_application
from tools.mock.clouds import new_service_account

# The loop's default pool holds min(32, cpus + 4) threads (concurrent.futures.ThreadPoolExecutor):
# more failed requests than that, each leaving an exchange behind, filled it before.
DEFAULT_POOL_THREADS = min(32, (os.cpu_count() or 1) + 4)
KEY_ENV = "SWITCHBOARD_UPSTREAM_VX_HANGING"
DOC = {
    "resilience": {"max_retries": 0, "breaker_failure_threshold": 1000},
    "providers": [
        {
            "name": "vx",
            "dialect": "vertex",
            "base_url": "http://127.0.0.1:9/v1/projects/p/locations/l",
            "api_key_env": KEY_ENV,
            "first_token_timeout_ms": 150,
            "total_timeout_ms": 1000,
        }
    ],
    "models": [{"id": "vx-chat", "provider": "vx", "upstream_model": "gemini-x", "capabilities": ["chat"]}],
    "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
}
HI = {"model": "vx-chat", "messages": [{"role": "user", "content": "hi"}]}


class Hanging:
    """A loopback listener that accepts connections, reads nothing and never answers."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)

        self.server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/internal-token-endpoint"

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def hanging() -> AsyncIterator[Hanging]:
    listener = Hanging()
    yield listener
    listener.close()


@pytest.fixture
def restored_snapshot():
    previous = live.current()
    yield
    live.swap(previous)


@pytest.mark.django_db(transaction=True)
async def test_a_hanging_token_endpoint_leaves_a_key_revocation_applied_within_a_second(
    hanging, process, restored_snapshot, monkeypatch
):
    from policies.keys import create_api_key
    from policies.models import Agent, ApiKey
    from routing.config.store import import_document

    token_uri = await hanging.start()
    sa, _ = new_service_account(token_uri)
    monkeypatch.setenv(KEY_ENV, sa)
    db = ThreadPoolExecutor(1)  # the test's own database thread: the ORM refuses the loop's thread
    loop = asyncio.get_running_loop()

    def setup() -> str:
        import_document(copy.deepcopy(DOC))
        return create_api_key(agent=Agent.objects.get(name="bot"))[1]

    secret = await loop.run_in_executor(db, setup)
    assert await live.rebuild("test")
    headers = {"Authorization": f"Bearer {secret}"}
    transport = httpx.ASGITransport(app=gateway_application)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as client:
        for _ in range(DEFAULT_POOL_THREADS + 2):
            answer = await client.post("/v1/chat/completions", json=HI)
            assert answer.status_code in (502, 504), answer.text  # the key is accepted; the token never comes
            text = answer.text
            assert "127.0.0.1" not in text and token_uri.split(":")[2].split("/")[0] not in text
            assert "internal-token-endpoint" not in text and "HTTPConnectionPool" not in text
        assert process.transport.blocking.token_exchange.running == 1  # one exchange for the account, not one each

        await loop.run_in_executor(db, lambda: ApiKey.objects.update(revoked=True))
        started = loop.time()
        assert await asyncio.wait_for(live.rebuild("revoked"), 1.0)
        refused = await client.post("/v1/chat/completions", json=HI)
        assert loop.time() - started < 1.0
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    hanging.close()
    db.shutdown()


async def test_a_failing_token_endpoint_opens_the_providers_breaker_without_showing_its_address(
    process, restored_snapshot
):
    from routing.config.snapshot import build_snapshot
    from tests.gateway.conftest import API_KEY, key_rows

    sa, _ = new_service_account("http://127.0.0.1:9/refused-token-endpoint")  # nothing listens on port 9
    doc = copy.deepcopy(DOC)
    doc["resilience"]["breaker_failure_threshold"] = 2
    doc["providers"][0].update(first_token_timeout_ms=10000, total_timeout_ms=20000)  # the refusal is the answer
    live.swap(build_snapshot(doc, key_rows(), {KEY_ENV: sa}, version=1))
    transport = httpx.ASGITransport(app=gateway_application)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as client:
        codes = []
        for _ in range(3):
            answer = await client.post("/v1/chat/completions", json=HI)
            assert ":9" not in answer.text and "refused-token-endpoint" not in answer.text
            codes.append((answer.status_code, answer.json()["error"]["code"]))
    assert codes[:2] == [(502, "upstream_error")] * 2
    assert codes[2] == (503, "circuit_open")


async def test_waiters_share_one_exchange_and_give_up_after_the_pools_timeout(hanging):
    token_uri = await hanging.start()
    sa, _ = new_service_account(token_uri)
    pool = BlockingPool("token-exchange", 1, 0.2)
    # The exchange's own socket timeout is longer than the waiters' here, so its thread is still held below.
    tokens = vertex.ServiceAccountTokens(pool=pool, exchange=functools.partial(vertex._exchange, timeout_s=30))
    results = await asyncio.gather(*(tokens.token(sa, "vx") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, UpstreamFailure) for r in results)
    assert {r.kind for r in results} == {FailureKind.CONNECT_TIMEOUT}
    assert all(r.is_provider_fault and r.charges_link for r in results)
    assert all("127.0.0.1" not in r.message and "internal-token-endpoint" not in r.message for r in results)
    # Another account while the pool's one thread is still held: refused at once, not queued.
    other, _ = new_service_account(token_uri, "other@demo-project.iam.gserviceaccount.com")
    assert pool.running == 1
    with pytest.raises(UpstreamFailure) as busy:
        await tokens.token(other, "vx")
    assert busy.value.kind is FailureKind.CONNECT_ERROR and pool.running == 1
    assert "127.0.0.1" not in busy.value.message
    # A waiter that comes after the others gave up joins the same exchange instead of starting one.
    with pytest.raises(UpstreamFailure):
        await tokens.token(sa, "vx")
    assert pool.running == 1 and len(hanging.writers) == 1
