"""Token classes priced exactly end to end (docs/usage-records.md#token-classes): the mock answers with
recorded usage objects; the record stores the classes, its cost is the published-price figure, and
the budget's spend is the same."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_usage_e2e import usage_rows, wait_for

FIXTURES = Path(__file__).parent.parent / "fixtures" / "usage"

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
  - name: mock-claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
models:
  - id: tp-sonnet
    provider: mock-claude
    upstream_model: {up}-sonnet
    capabilities: [chat]
    input_price_per_mtok: 3
    output_price_per_mtok: 15
    cache_read_price_per_mtok: 0.3
    cache_write_price_per_mtok: 3.75
    cache_write_1h_price_per_mtok: 6
  - id: tp-4o
    provider: mock
    upstream_model: {up}-4o
    capabilities: [chat]
    input_price_per_mtok: 2.5
    output_price_per_mtok: 10
    cache_read_price_per_mtok: 1.25
  - id: tp-audio
    provider: mock
    upstream_model: {up}-audio
    capabilities: [chat]
    input_price_per_mtok: 2.5
    output_price_per_mtok: 10
    audio_input_price_per_mtok: 40
    audio_output_price_per_mtok: 80
  - id: tp-dated
    provider: mock
    upstream_model: {up}-dated
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
    prices:
      - {{effective_from: 2020-01-01, output: 2000}}
      - {{effective_from: 2999-01-01, output: 9000}}
  - id: tp-deal
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
    deployments:
      - {{provider: mock, upstream_model: "{up}-deal", prices: {{output: 500}}}}
orgs:
  - name: {org}
    budget: {{usd: 5, period: total}}
    agents:
      - name: bot
"""

# model, fixture, expected cost (tests/core/test_prices.py works each out), the class columns
CASES = [
    ("tp-sonnet", "anthropic_cache.json", "0.016539", {"cache_read_tokens": 1800, "cache_write_tokens": 456}),
    ("tp-4o", "openai_cached.json", "0.005615", {"cache_read_tokens": 1920, "reasoning_tokens": None}),
    ("tp-audio", "openai_audio.json", "0.03625", {"audio_input_tokens": 80, "audio_output_tokens": 400}),
]


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    org, up = f"t{uuid.uuid4().hex[:8]}", f"tp-{uuid.uuid4().hex[:6]}"
    gateway = make_gateway(CONFIG.format(mock=mock_upstream.url, org=org, up=up), org=org, env={"REDIS_URL": ""})
    gateway.up = up
    return gateway


def spent(gw) -> Decimal:
    """The org budget's spend as the gateway counts it (a request whose worst case never fits says it)."""
    answer = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": "tp-audio", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1_000_000},
        timeout=20,
    )
    assert answer.status_code == 402, answer.text
    shown = re.search(r"has spent \$([0-9.]+)", answer.json()["error"]["message"])
    assert shown, answer.text
    return Decimal(shown.group(1))


def test_recorded_usage_is_stored_by_class_priced_exactly_and_settles_the_budget(gw, mock_upstream) -> None:
    total = spent(gw)  # what the module's other test spent, whichever order they run in
    for model, fixture, usd, columns in CASES:
        upstream = gw.up + model.removeprefix("tp")
        mock_upstream.script(upstream, [{"status": 200, "body": (FIXTURES / fixture).read_text()}])
        rid = f"tp-{uuid.uuid4().hex[:8]}"
        answer = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": rid},
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 600},
            timeout=20,
        )
        assert answer.status_code == 200, answer.text

        def row(rid: str = rid) -> dict | None:
            rows = [r for r in usage_rows(gw.database_url) if r["request_id"] == rid]
            return rows[0] if rows else None

        wait_for(lambda: row() is not None, 15, f"the record of {model}")
        record = row()
        assert Decimal(str(record["cost"])) == Decimal(usd), (model, record)
        for column, value in columns.items():
            assert record[column] == value, (model, column, record)
        total += Decimal(usd)
    assert abs(spent(gw) - total) <= Decimal("0.0001")  # the message shows four decimals


def test_the_dated_price_in_effect_and_a_deployments_negotiated_price_are_used_and_named(gw) -> None:
    """The mock bills 12 prompt and 7 completion tokens: at $1 / $2000 from 2020 (not the flat $1000,
    nor 2999's $9000), and at the deployment's negotiated $500."""
    for model, version, usd in (("tp-dated", "2020-01-01", "0.014012"), ("tp-deal", "deployment", "0.003512")):
        rid = f"tp-{uuid.uuid4().hex[:8]}"
        answer = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": rid},
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
            timeout=20,
        )
        assert answer.status_code == 200, answer.text

        def row(rid: str = rid) -> dict | None:
            rows = [r for r in usage_rows(gw.database_url) if r["request_id"] == rid]
            return rows[0] if rows else None

        wait_for(lambda: row() is not None, 15, f"the record of {model}")
        record = row()
        assert (record["price_version"], Decimal(str(record["cost"]))) == (version, Decimal(usd)), record
