"""A price catalogue's proposal accepted while a real gateway serves (docs/commands.md#sync_prices):
`manage.py sync_prices` in another process proposes a dated version, `--accept` writes it, and the
running server prices requests by it within the reload bound (1 s) — no restart — while the
operator's own flat price stays in the configuration."""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal

import httpx

from tests.e2e.harness import SLACK_S
from tests.e2e.test_usage_e2e import usage_rows, wait_for

CONFIG = """
resilience:
  max_retries: 0
providers:
  - {{name: mock, dialect: openai, base_url: "{mock}/v1"}}
models:
  - id: sp-chat
    provider: mock
    upstream_model: {up}
    capabilities: [chat]
    input_price_per_mtok: 200
    output_price_per_mtok: 800
orgs:
  - name: acme
    agents:
      - name: bot
"""

# The mock bills 12 prompt and 7 completion tokens: $0.008 at the operator's price, $0.006 at the catalogue's.
BEFORE, AFTER = Decimal("0.008"), Decimal("0.006")


def test_an_accepted_proposal_prices_the_next_requests_within_a_second_without_a_restart(
    make_gateway, mock_upstream, tmp_path
) -> None:
    up = f"sp-{uuid.uuid4().hex[:6]}-mini"
    catalogue = tmp_path / "catalogue.json"
    catalogue.write_text(
        json.dumps(
            {
                "providers": [
                    {
                        "id": "openai",
                        "models": [
                            {"id": "gpt-4o-mini", "aliases": [up], "prices": {"input_mtok": 150, "output_mtok": 600}}
                        ],
                    }
                ]
            }
        )
    )
    gw = make_gateway(
        CONFIG.format(mock=mock_upstream.url, up=up),
        env={"REDIS_URL": "", "SWITCHBOARD_PRICE_PROPOSALS_FILE": str(tmp_path / "proposals.json")},
    )
    pid = gw.process.pid
    sent: list[tuple[float, str]] = []  # (when sent, request id)

    def ask() -> None:
        rid = f"sp-{uuid.uuid4().hex[:10]}"
        sent.append((time.monotonic(), rid))
        answer = httpx.post(
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": rid},
            json={"model": "sp-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
            timeout=20,
        )
        assert answer.status_code == 200, answer.text

    ask()
    proposed = gw.manage("sync_prices", "--from", str(catalogue), "--day", "2026-01-01").stdout
    assert f"proposed: sp-chat ({up}) from 2026-01-01" in proposed, proposed
    ask()  # a proposal only: nothing changes yet
    accepted = gw.manage("sync_prices", "--accept", "sp-chat").stdout
    assert accepted.startswith("accepted: sp-chat priced from 2026-01-01"), accepted
    accepted_at = time.monotonic()
    while time.monotonic() < accepted_at + 1.0 + SLACK_S:
        ask()
        time.sleep(0.05)

    def records() -> dict[str, dict]:
        return {r["request_id"]: r for r in usage_rows(gw.database_url)}

    wait_for(lambda: all(rid in records() for _, rid in sent), 15, "every request's record")
    rows = records()
    priced = [(at, rows[rid]["price_version"], Decimal(str(rows[rid]["cost"]))) for at, rid in sent]
    assert priced[0][1:] == ("", BEFORE) and priced[1][1:] == ("", BEFORE)  # the operator's flat price
    new = [i for i, (_, version, cost) in enumerate(priced) if (version, cost) == ("2026-01-01", AFTER)]
    assert new, priced
    first = new[0]
    assert new == list(range(first, len(priced)))  # from the first request priced anew, every one after
    assert priced[first][0] - accepted_at <= 1.0 + SLACK_S, priced  # within the reload bound (a loaded machine)
    assert gw.process.pid == pid and gw.process.poll() is None  # the same process: no restart
    assert "input_price_per_mtok: 200" in gw.manage("export_config").stdout  # the operator's price, kept
