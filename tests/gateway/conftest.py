"""In-process gateway: the ASGI handler called directly, with a snapshot swapped in.

No daphne and no database: the request path must not need either.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from tests.inprocess import gateway_application

API_KEY = "sb-test-key-0123456789"


def document(upstream: str) -> dict:
    return {
        "resilience": {"max_retries": 1, "backoff_base_ms": 1, "backoff_max_ms": 2},
        "providers": [{"name": "mock", "dialect": "openai", "base_url": f"{upstream}/v1"}],
        "models": [
            {
                "id": "chat-a",
                "provider": "mock",
                "upstream_model": "ip-chat-a",
                "capabilities": ["chat", "streaming"],
                "context_window": 1000,
                "fallbacks": ["chat-b"],
            },
            {
                "id": "chat-b",
                "provider": "mock",
                "upstream_model": "ip-chat-b",
                "capabilities": ["chat", "streaming"],
                "context_window": 100000,
            },
            {"id": "vendor/secret", "provider": "mock", "upstream_model": "ip-secret", "capabilities": ["chat"]},
            {"id": "embed-a", "provider": "mock", "upstream_model": "ip-embed", "capabilities": ["embeddings"]},
        ],
        "aliases": {"fast": "chat-a"},
        "orgs": [
            {
                "name": "acme",
                "agents": [{"name": "bot"}, {"name": "defaulted", "default_model": "fast"}],
                "policies": [{"pattern": "*/*", "action": "deny", "priority": 10}],
            }
        ],
    }


def key_rows(agent: str = "bot") -> list[dict]:
    return [
        {
            "key_hash": hashlib.sha256(API_KEY.encode()).hexdigest(),
            "prefix": API_KEY[:10],
            "org": "acme",
            "agent": agent,
            "expires_at": None,
        }
    ]


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    from tools.mock.upstream import start_mock

    runner, port = await start_mock(0)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def gateway(upstream: str) -> AsyncIterator[httpx.AsyncClient]:
    previous = live.current()
    live.swap(build_snapshot(document(upstream), key_rows(), {}, version=1))
    transport = httpx.ASGITransport(app=gateway_application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gateway", headers={"Authorization": f"Bearer {API_KEY}"}
    ) as client:
        yield client
    live.swap(previous)
    from routing.runtime.process import current

    upstream_transport = current().transport

    await upstream_transport.aclose()
