"""Streams accounted from their first frame (docs/usage-records.md#streams): the worker is killed with
SIGKILL mid-stream; the restarted process writes one record per stream, the cut ones `interrupted`
with at least the completion tokens of the frames the client received, charged to the budget.

The streams are of every kind the gateway relays: chat completions, `/v1/responses` relayed from an
upstream that speaks Responses, and `/v1/responses` translated from a chat-only link's chunks."""

from __future__ import annotations

import re
import signal
import threading
import time
import uuid
from decimal import Decimal

import httpx

from tests.e2e.test_usage_e2e import usage_rows, wait_for

# $1 / $1000 per million prompt / completion tokens.
CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: sc-chat
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
  - id: sc-responses
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat, responses, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
  - id: sc-translated
    provider: mock
    upstream_model: {upstream}
    capabilities: [chat, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 1000
orgs:
  - name: {org}
{budget}    agents:
      - name: bot
"""
STREAMS = 40  # the scale: every stream relaying when the worker is killed
# (endpoint, model, body, the data line of a text frame, of the clean end), taken in turn by the streams
KINDS = [  # the usage record's endpoint is the path's first part
    ("chat/completions", "sc-chat", {"messages": [{"role": "user", "content": "hi"}]}, '"tok', "[DONE]"),
    ("responses", "sc-responses", {"input": "hi"}, '"response.output_text.delta"', '"response.completed"'),
    ("responses", "sc-translated", {"input": "hi"}, '"response.output_text.delta"', '"response.completed"'),
]


def kind_of(request_id: str) -> tuple:
    """The kind of stream a request id was given (its number, in turn)."""
    return KINDS[int(request_id.rsplit("-", 1)[1]) % len(KINDS)]


def config(mock_upstream, org: str, upstream: str, budget: str = "") -> str:
    return CONFIG.format(mock=mock_upstream.url, org=org, upstream=upstream, budget=budget)


def test_kill_9_mid_stream_leaves_one_interrupted_record_per_stream_charged_to_the_budget(make_gateway, mock_upstream):
    org, upstream = f"c{uuid.uuid4().hex[:8]}", f"sc-{uuid.uuid4().hex[:6]}"
    # Twenty frames 150 ms apart: about 3 s a stream (a Responses one holds its first four events until the
    # first delta), cut after a few frames even when a loaded machine is slow to start all of them.
    mock_upstream.script(upstream, then={"frames": 20, "frame_delay_ms": 150})
    gw = make_gateway(config(mock_upstream, org, upstream), org=org, env={"REDIS_URL": ""})
    run = uuid.uuid4().hex[:8]
    received = {f"sc-{run}-{i}": 0 for i in range(STREAMS)}
    finished: set[str] = set()

    def stream(request_id: str) -> None:
        endpoint, model, body, text, end = kind_of(request_id)
        try:
            with httpx.stream(
                "POST",
                f"{gw.url}/v1/{endpoint}",
                headers={"Authorization": f"Bearer {gw.api_key}", "X-Request-Id": request_id},
                json={"model": model, **body, "stream": True},
                timeout=20,
            ) as answer:
                assert answer.status_code == 200
                for line in answer.iter_lines():
                    if line.startswith("data: {") and text in line:
                        received[request_id] += 1
                    elif line.startswith("data: ") and end in line:
                        finished.add(request_id)
        except httpx.HTTPError:
            pass  # cut by the kill

    threads = [threading.Thread(target=stream, args=(rid,)) for rid in received]
    for t in threads:
        t.start()
    wait_for(lambda: all(n >= 2 for n in received.values()), 20, "every stream relaying")
    gw.process.send_signal(signal.SIGKILL)
    gw.process.wait(timeout=10)
    joined_by = time.monotonic() + 20  # one bound for all: the kill resets every connection
    for t in threads:
        t.join(timeout=max(0.0, joined_by - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a client stream outlived the killed worker"
    gw.log.close()
    gw.process = None
    cut = [rid for rid in received if rid not in finished]
    assert len(cut) >= STREAMS // 2, f"the kill came too late: {len(finished)} streams had finished"

    gw.serve()  # same database, same spool directory
    httpx.get(f"{gw.url}/health", timeout=10)  # any request starts the background writer
    wait_for(lambda: len(usage_rows(gw.database_url)) >= STREAMS, 15, "a record for every stream")
    time.sleep(1.0)  # a duplicate would show up by now
    rows = {}
    for row in usage_rows(gw.database_url):
        assert row["request_id"] not in rows, f"two records for {row['request_id']}"
        rows[row["request_id"]] = row
    assert sorted(rows) == sorted(received)
    assert {kind_of(rid)[1] for rid in cut} == {k[1] for k in KINDS}
    for rid in cut:
        row = rows[rid]
        assert (row["status"], row["error_code"], bool(row["streamed"])) == (200, "interrupted", True), row
        assert row["endpoint"] == kind_of(rid)[0].split("/")[0], row
        assert row["completion_tokens"] >= received[rid] >= 2, (row["completion_tokens"], received[rid])
        assert row["prompt_tokens"] and Decimal(str(row["cost"])) > 0, row

    # Charged to the budget: an org budget added now starts from the records, interrupted ones included.
    spent = sum(Decimal(str(r["cost"])) for r in rows.values())
    budget = spent + Decimal("0.005")  # a request's worst case here is $0.010003: it no longer fits
    gw.import_config(config(mock_upstream, org, upstream, f"    budget: {{usd: {budget}, period: total}}\n"))
    key = gw.create_key(org, "bot")  # accepted once the process has loaded the budget
    answer = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "sc-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10},
        timeout=20,
    )
    assert answer.status_code == 402, answer.text
    shown = re.search(r"has spent \$([0-9.]+)", answer.json()["error"]["message"])
    assert shown and abs(Decimal(shown.group(1)) - spent) <= Decimal("0.0001"), (shown, spent)
