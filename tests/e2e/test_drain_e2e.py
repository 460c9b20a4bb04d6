"""A served gateway keeps a translated stream's upstream connection without making its client wait
(docs/performance.md#drain-after): the Anthropic SDK's `messages.stream` leaves on `message_stop`, the
upstream's transfer ends 20 ms later, and every answer is recorded as the 200 it was."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import anthropic
import openai
import pytest
from aiohttp import web

from tests.e2e.test_usage_e2e import usage_rows, wait_for
from tests.gateway.test_drain_after import Upstream, serve

CONFIG = """
providers:
  - name: claude
    dialect: anthropic
    base_url: {url}/v1
models:
  - id: claude
    provider: claude
    upstream_model: up-claude
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
"""
HI = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, str]]:
    """The loopback Anthropic upstream of tests/gateway/test_drain_after.py, on a loop of its own."""
    state = Upstream(trailing_s=0.02)
    loop = asyncio.new_event_loop()
    started: list[int] = []
    ready = threading.Event()

    async def start() -> web.AppRunner:
        runner, port = await serve(state)
        started.append(port)
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield state, f"http://127.0.0.1:{started[0]}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_sdk_streams_keep_one_upstream_connection_and_are_recorded_whole(make_gateway, upstream) -> None:
    state, url = upstream
    gw = make_gateway(CONFIG.format(url=url))
    claude = anthropic.Anthropic(base_url=gw.url, api_key=gw.api_key, max_retries=0, timeout=20)
    chat = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)
    # A pause between calls, as a client's turn has: back to back, a call would find the last
    # connection still draining and open another (docs/performance.md#drain-after).
    for _ in range(4):
        with claude.messages.stream(model="claude", max_tokens=16, messages=HI) as stream:
            assert "".join(stream.text_stream) == "hi"
        time.sleep(0.1)
        chunks = chat.chat.completions.create(model="claude", messages=HI, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hi"
        time.sleep(0.1)
    rows: list[dict] = []

    def found() -> bool:
        rows[:] = [r for r in usage_rows(gw.database_url) if r["model_used"] == "claude"]
        return len(rows) == 8

    wait_for(found, 10, "the usage rows of 8 streams")
    assert sorted(r["status"] for r in rows) == [200] * 8  # none recorded as a 499
    # one; two when a loaded machine holds a drain past its 50 ms (closing each stream opened 8)
    assert len(set(state.peers)) <= 2, f"{len(set(state.peers))} upstream connections for 8 streams"
    wait_for(lambda: state.ended == 8, 5, "every upstream transfer written to its end")
