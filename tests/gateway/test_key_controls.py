"""An API key's own controls on the request path: limits, budget, model list, expiry, enabled
(docs/limits.md#keys). In-process, from the snapshot: no database per request."""

from __future__ import annotations

import copy
import time

import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, document, key_rows

PRICES = {"input_price_per_mtok": 1.0, "output_price_per_mtok": 1000.0}
MOCK_COST = (12 * 1.0 + 7 * 1000.0) / 1e6  # the mock answers 12 prompt + 7 completion tokens


def chat(model: str = "chat-b", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def keyed(gateway, upstream, monkeypatch):
    """Swap in a snapshot whose key row carries `controls`; fresh buckets and accounts."""
    records: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **row: records.append(row))
    current().limiter.forget()
    current().budgets.forget()

    def apply(**controls) -> list[dict]:
        doc = copy.deepcopy(document(upstream))
        for model in doc["models"]:
            if model["id"] == "chat-b":
                model.update(PRICES)
        doc["providers"].append({"name": "dead", "base_url": "http://127.0.0.1:9/v1"})
        doc["models"].append(
            {
                "id": "dead-chat",
                "provider": "dead",
                "upstream_model": "x",
                "capabilities": ["chat"],
                "fallbacks": ["chat-b"],
            }
        )
        rows = [{**row, **controls} for row in key_rows()]
        live.swap(build_snapshot(doc, rows, {}, version=2))
        return records

    yield apply
    current().limiter.forget()
    current().budgets.forget()


async def test_a_key_over_its_own_rpm_gets_429_naming_the_key(gateway, keyed):
    keyed(limits={"rpm": 2})
    assert [(await gateway.post("/v1/chat/completions", json=chat())).status_code for _ in range(2)] == [200, 200]
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and API_KEY[:10] in error["message"]
    assert refused.headers["x-ratelimit-limit-requests"] == "2"


async def test_a_key_over_its_own_budget_gets_402(gateway, keyed):
    keyed(budget={"usd": MOCK_COST * 1.5, "period": "day"})
    assert (await gateway.post("/v1/chat/completions", json=chat(max_tokens=7))).status_code == 200
    refused = await gateway.post("/v1/chat/completions", json=chat(max_tokens=7))
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert "API key" in refused.json()["error"]["message"]


async def test_a_key_narrows_its_orgs_policy_and_never_widens_it(gateway, keyed):
    keyed(models=["fast", "chat-b*", "vendor/*"])
    assert (await gateway.post("/v1/chat/completions", json=chat("fast"))).status_code == 200  # by alias
    assert (await gateway.post("/v1/chat/completions", json=chat("chat-b"))).status_code == 200
    outside = await gateway.post("/v1/chat/completions", json=chat("chat-a"))  # fast's model, by its id
    assert outside.status_code == 403
    assert outside.json()["error"]["code"] == "model_denied" and "key" in outside.json()["error"]["message"]
    widened = await gateway.post("/v1/chat/completions", json=chat("vendor/secret"))  # the org denies */*
    assert widened.status_code == 403 and "organisation" in widened.json()["error"]["message"]


async def test_an_empty_model_list_allows_nothing(gateway, keyed):
    keyed(models=[])
    assert (await gateway.post("/v1/chat/completions", json=chat())).status_code == 403


async def test_an_expired_key_is_refused_by_the_clock_without_a_reload(gateway, keyed):
    keyed(expires_at=time.time() + 0.3)
    assert (await gateway.post("/v1/chat/completions", json=chat())).status_code == 200
    version = live.current().version
    time.sleep(0.35)
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert live.current().version == version  # no new snapshot: the clock alone
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key" and "expired" in refused.json()["error"]["message"]


async def test_a_disabled_key_is_refused_saying_so(gateway, keyed):
    keyed(enabled=False)
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key" and "disabled" in refused.json()["error"]["message"]


async def test_a_rotated_secret_past_its_grace_says_it_was_rotated(gateway, keyed):
    keyed(expires_at=time.time() - 1, rotated=True)
    refused = await gateway.post("/v1/chat/completions", json=chat())
    assert refused.status_code == 401 and "rotated" in refused.json()["error"]["message"]


async def test_a_fallback_outside_the_keys_list_is_skipped(gateway, keyed):
    keyed()
    assert (await gateway.post("/v1/chat/completions", json=chat("dead-chat"))).status_code == 200  # via chat-b
    keyed(models=["dead-chat"])
    failed = await gateway.post("/v1/chat/completions", json=chat("dead-chat"))
    assert failed.status_code == 502  # the dead link only: chat-b was not the key's to use
    keyed(models=["dead-chat", "chat-b"])
    assert (await gateway.post("/v1/chat/completions", json=chat("dead-chat"))).status_code == 200


async def test_the_models_list_shows_only_what_the_key_may_use(gateway, keyed):
    keyed()
    every = {m["id"] for m in (await gateway.get("/v1/models")).json()["data"]}
    assert {"chat-a", "chat-b", "fast"} <= every
    keyed(models=["fast", "chat-b*"])
    listed = {m["id"] for m in (await gateway.get("/v1/models")).json()["data"]}
    assert listed == {"fast", "chat-b"}  # chat-a only through its alias, as a request may use it
