"""A budget while PostgreSQL is down (docs/limits.md#durable): requests are checked against the last
known spend, nothing fails, and the outage's spend, once its spooled usage records land, is counted
exactly once by a restarted process."""

from __future__ import annotations

import tempfile
import uuid
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.harness import Gateway, migrated_postgres
from tests.e2e.tcp_proxy import TcpProxy
from tests.e2e.test_usage_e2e import backlog, usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: pgb-chat
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
orgs:
  - name: acme
    agents:
      - name: bot
        budget: {{usd: 0.035, period: total}}
"""
COST = Decimal("0.007012")  # 12 prompt + 7 completion tokens at $1 / $1000 per million


@pytest.fixture
def fresh_postgres(postgres_url):
    with migrated_postgres(postgres_url, "sb_e2e_budget") as url:
        yield url


def ask(gw: Gateway) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": "pgb-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
        timeout=20,
    )


def test_database_down_budget_checked_on_known_spend_and_counted_once(fresh_postgres, mock_upstream):
    direct = urlparse(fresh_postgres)
    proxy = TcpProxy(direct.port or 5432, direct.hostname or "127.0.0.1")
    via_proxy = direct._replace(netloc=f"{direct.username}:{direct.password}@127.0.0.1:{proxy.port}").geturl()
    upstream = f"pgb-{uuid.uuid4().hex[:6]}"
    gw = Gateway(
        database_url=via_proxy,
        config_yaml=CONFIG.format(mock=mock_upstream.url, upstream=upstream),
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        extra_env={"SWITCHBOARD_USAGE_FLUSH_S": "0.1", "REDIS_URL": ""},
    )
    try:
        gw.start()
        assert [ask(gw).status_code for _ in range(2)] == [200, 200]
        wait_for(lambda: backlog(gw) == 0, 5, "the first rows acknowledged")

        proxy.cut()
        # $0.014 spent, $0.021 left: two more $0.01 worst cases fit, then 402 (never a 5xx).
        statuses = [ask(gw).status_code for _ in range(4)]
        assert statuses == [200, 200, 402, 402]
        assert mock_upstream.count(upstream) == 4

        proxy.restore()
        wait_for(lambda: backlog(gw) == 0 and len(usage_rows(fresh_postgres)) == 6, 15, "the outage's records")
        rows = usage_rows(fresh_postgres)
        assert len({r["record_id"] for r in rows}) == 6
        spent = sum((Decimal(str(r["cost"])) for r in rows if r["cost"] is not None), Decimal(0))
        assert spent == 4 * COST  # each served request once; the refusals cost nothing

        gw.stop()
        gw.serve()  # the restarted process reads the spend from the records: the same 402, the same figure
        again = ask(gw)
        assert again.status_code == 402
        assert "has spent $0.0280 of its $0.035 budget" in again.json()["error"]["message"]
        assert mock_upstream.count(upstream) == 4
    finally:
        gw.stop()
        proxy.stop()
