"""Partial streams charged (docs/usage-records.md#partial): a stream cut by its client or by a break of
the upstream is recorded and charged with the prompt and the completion tokens relayed, and the
budget settles to the record's cost."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal

import httpx

from tests.e2e.test_usage_e2e import usage_rows, wait_for

# $1 / $1000 per million prompt / completion tokens: a completion token costs $0.001.
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
  - id: ps-claude
    provider: mock-claude
    upstream_model: {upstream}
    capabilities: [chat, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
  - id: ps-chat
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
orgs:
  - name: {org}
    budget: {{usd: 5, period: total}}
    agents:
      - name: bot
"""


def spent(gw) -> Decimal:
    """The org budget's spend as the gateway counts it: a request whose worst case ($10) never fits says it."""
    answer = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": "ps-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10000},
        timeout=20,
    )
    assert answer.status_code == 402, answer.text
    shown = re.search(r"has spent \$([0-9.]+)", answer.json()["error"]["message"])
    assert shown, answer.text
    return Decimal(shown.group(1))


def start(make_gateway, mock_upstream, step: dict):
    org, upstream = f"p{uuid.uuid4().hex[:8]}", f"ps-{uuid.uuid4().hex[:6]}"
    mock_upstream.script(upstream, then=step)
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url, org=org, upstream=upstream), org=org, env={"REDIS_URL": ""})
    return gw


def stream(gw, request_id: str, keep: int | None = None) -> int:
    """Stream one chat; with `keep`, hang up after that many content frames. Returns content frames received."""
    received = 0
    try:
        with httpx.stream(
            "POST",
            f"{gw.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": request_id},
            json={"model": "ps-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            timeout=20,
        ) as answer:
            assert answer.status_code == 200
            for line in answer.iter_lines():
                if line.startswith("data: {") and '"tok' in line:
                    received += 1
                    if keep is not None and received >= keep:
                        break  # the client goes away mid-stream
    except httpx.HTTPError:
        pass
    return received


def record(gw, request_id: str) -> dict:
    def row() -> dict | None:
        rows = [r for r in usage_rows(gw.database_url) if r["request_id"] == request_id]
        return rows[0] if rows else None

    wait_for(lambda: row() is not None, 15, "the stream's usage record")
    return row()


def test_a_client_that_leaves_after_half_a_stream_is_charged_the_frames_it_was_sent(make_gateway, mock_upstream):
    gw = start(make_gateway, mock_upstream, {"frames": 20, "frame_delay_ms": 100})
    rid = f"half-{uuid.uuid4().hex[:8]}"
    assert stream(gw, rid, keep=10) == 10
    row = record(gw, rid)
    assert (row["status"], row["error_code"]) == (499, "client_closed_request"), row
    # Every content frame the client got is at least one token; the whole stream would be 20 frames.
    assert 10 <= row["completion_tokens"] < 20 * 2, row
    assert row["prompt_tokens"] and row["prompt_tokens"] > 0, row
    cost = Decimal(str(row["cost"]))
    assert cost >= Decimal("0.010"), row
    assert abs(spent(gw) - cost) <= Decimal("0.0001")  # the message shows four decimals, (row, cost)


def test_an_upstream_break_after_5_frames_is_charged_the_5_frames(make_gateway, mock_upstream):
    gw = start(make_gateway, mock_upstream, {"frames": 12, "break_after": 5})
    rid = f"brk-{uuid.uuid4().hex[:8]}"
    assert stream(gw, rid) == 5
    row = record(gw, rid)
    assert row["status"] == 200 and row["error_code"], row
    assert 5 <= row["completion_tokens"] < 12, row
    cost = Decimal(str(row["cost"]))
    assert cost >= Decimal("0.005"), row
    assert abs(spent(gw) - cost) <= Decimal("0.0001")  # the message shows four decimals, (row, cost)


def test_an_anthropic_stream_cut_after_5_deltas_is_charged_the_deltas_not_message_starts_one_token(
    make_gateway, mock_upstream
):
    # message_start says output_tokens 1; the final count comes in message_delta, which never arrives.
    gw = start(make_gateway, mock_upstream, {"frames": 12, "break_after": 8})
    rid = f"msg-{uuid.uuid4().hex[:8]}"
    raw = httpx.post(
        f"{gw.url}/v1/messages",
        headers={"x-api-key": gw.api_key, "X-Request-Id": rid},
        json={"model": "ps-claude", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        timeout=20,
    )
    deltas = raw.text.count("event: content_block_delta")
    assert deltas == 5, raw.text
    row = record(gw, rid)
    assert row["status"] == 200 and row["error_code"], row
    assert row["prompt_tokens"] == 12, row  # the provider's own count, from message_start
    assert 5 <= row["completion_tokens"] < 12, row
    cost = Decimal(str(row["cost"]))
    assert cost >= Decimal("0.005"), row
    assert abs(spent(gw) - cost) <= Decimal("0.0001"), (row, cost)
