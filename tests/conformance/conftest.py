"""The gateway in process with one link per dialect, every link on the repo's mock upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest_asyncio

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.conformance.walk import LINKS
from tests.gateway.conftest import key_rows
from tools.mock.bedrock import demo_credentials
from tools.mock.clouds import new_service_account
from tools.mock.upstream import start_mock, state_of

CAPS = ["chat", "streaming", "tools", "structured_output", "vision", "reasoning"]
PROVIDERS = {
    "openai": ("openai", "/v1", None),
    "azure_openai": ("azure_openai", "/azure/openai?api-version=2024-10-21", "SWITCHBOARD_UPSTREAM_MATRIX"),
    "anthropic": ("anthropic", "/anthropic/v1", None),
    "gemini": ("gemini", "/gemini/v1beta", "SWITCHBOARD_UPSTREAM_MATRIX"),
    "vertex": ("vertex", "/vertex/v1/projects/p1/locations/us-east5", "SWITCHBOARD_UPSTREAM_MATRIX_VX"),
    "bedrock": ("bedrock", "/bedrock?region=us-east-1", "SWITCHBOARD_UPSTREAM_MATRIX_AWS"),
    "ollama": ("ollama", "/v1", None),
}


def document(mock: str) -> dict:
    providers = []
    for name, (dialect, path, key) in PROVIDERS.items():
        providers.append({"name": name, "dialect": dialect, "base_url": f"{mock}{path}"})
        if key:
            providers[-1]["api_key_env"] = key
    models = [
        {"id": model, "provider": link.split("-")[0], "upstream_model": upstream, "capabilities": CAPS}
        for link, (model, upstream, _) in LINKS.items()
    ]
    # outside the matrix: a Claude link with an OpenAI fallback (test_chat_gaps.py)
    chain = {"id": "m-chain-claude", "provider": "anthropic", "upstream_model": "up-anthropic", "capabilities": CAPS}
    models.append(chain | {"fallbacks": ["m-openai"]})
    return {
        "resilience": {"max_retries": 0},
        "providers": providers,
        "models": models,
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mock() -> AsyncIterator[Any]:
    runner, port = await start_mock(0)
    url = f"http://127.0.0.1:{port}"
    account, public = new_service_account(f"{url}/vertex/token", "matrix@p1.iam.gserviceaccount.com")
    async with httpx.AsyncClient(base_url=url) as control:
        email = orjson.loads(account)["client_email"]
        (await control.post("/_control/vertex", json={"client_email": email, "public_key": public})).raise_for_status()
    keys = {
        "SWITCHBOARD_UPSTREAM_MATRIX": "matrix-key",
        "SWITCHBOARD_UPSTREAM_MATRIX_AWS": demo_credentials(),
        "SWITCHBOARD_UPSTREAM_MATRIX_VX": account,
    }
    previous = live.current()
    live.swap(build_snapshot(document(url), key_rows(), keys, version=1))
    yield state_of(runner)
    live.swap(previous)
    await current().transport.aclose()
    await runner.cleanup()
