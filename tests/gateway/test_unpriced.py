"""`switchboard_unpriced_total{model}` (docs/metrics.md#spend): served requests nobody can put a price on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import REGISTRY

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application


def _unpriced(model: str) -> float:
    return REGISTRY.get_sample_value("switchboard_unpriced_total", {"model": model}) or 0.0


@pytest.fixture
async def client(upstream: str) -> AsyncIterator[httpx.AsyncClient]:
    doc = document(upstream)
    models = {m["id"]: m for m in doc["models"]}
    models["chat-b"].update(input_price_per_mtok=1.0, output_price_per_mtok=2.0)
    models["vendor/secret"].update(input_price_per_mtok=0, output_price_per_mtok=0)
    doc["orgs"][0]["policies"] = []
    previous = live.current()
    live.swap(build_snapshot(doc, key_rows(), {}, version=1))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway_application),
        base_url="http://gateway",
        headers={"Authorization": f"Bearer {API_KEY}"},
    ) as c:
        yield c
    live.swap(previous)
    await current().transport.aclose()


async def _chat(client: httpx.AsyncClient, model: str) -> None:
    r = await client.post(
        "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 200, r.text


async def test_a_model_without_prices_or_priced_at_zero_is_counted_and_a_priced_one_is_not(client) -> None:
    before = {m: _unpriced(m) for m in ("chat-a", "chat-b", "vendor/secret")}
    await _chat(client, "chat-a")  # no price at all: the record's cost is unknown
    await _chat(client, "chat-a")
    await _chat(client, "chat-b")  # priced
    await _chat(client, "vendor/secret")  # every price 0 although tokens were used
    assert _unpriced("chat-a") - before["chat-a"] == 2
    assert _unpriced("chat-b") - before["chat-b"] == 0
    assert _unpriced("vendor/secret") - before["vendor/secret"] == 1
