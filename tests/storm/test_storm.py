"""The 429 storm, end to end: a real server (daphne or uvicorn) in front of the real mock upstream.

500 concurrent requests hit models whose upstream answers 429 forever (one with a
fallback that also answers 429, one with no fallback). Users must see every request end
promptly with 429 or 503, the gateway must keep answering /health, and the upstream must
not be hammered: the breaker and the retry budget keep the number of upstream calls well
under what naive retrying would send (500 × (1 + max_retries)).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.harness import SLACK_S, Databases, Gateway, MockUpstream

MAX_RETRIES = 2
TOTAL_TIMEOUT_MS = 10_000
CLIENT_TIMEOUT_S = TOTAL_TIMEOUT_MS / 1000 + 5  # a request still open by then has hung
STORM = 500
UPSTREAM = {"storm-a": "up-storm-a", "storm-b": "up-storm-b", "storm-solo": "up-storm-solo"}

CONFIG = """
resilience:
  max_retries: {max_retries}
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: storm-a
    provider: mock
    upstream_model: up-storm-a
    capabilities: [chat]
    fallbacks: [storm-b]
    total_timeout_ms: {total}
  - id: storm-b
    provider: mock
    upstream_model: up-storm-b
    capabilities: [chat]
    total_timeout_ms: {total}
  - id: storm-solo
    provider: mock
    upstream_model: up-storm-solo
    capabilities: [chat]
    total_timeout_ms: {total}
orgs:
  - name: acme
    agents:
      - name: bot
"""


@pytest.fixture(scope="module")
def storm_gateway() -> Iterator[tuple[Gateway, MockUpstream]]:
    mock = MockUpstream()
    dbs = Databases()
    gateway = Gateway(
        database_url=dbs.new(),
        config_yaml=CONFIG.format(max_retries=MAX_RETRIES, mock=mock.url, total=TOTAL_TIMEOUT_MS),
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-storm-")),
    )
    try:
        for upstream in UPSTREAM.values():
            mock.script(upstream, [], then={"status": 429})
        gateway.start(org="acme", agent="bot")
        yield gateway, mock
    finally:
        gateway.stop()
        mock.stop()
        dbs.cleanup()
        shutil.rmtree(gateway.workdir, ignore_errors=True)


def _upstream_calls(mock: MockUpstream) -> dict[str, int]:
    return {model: mock.count(upstream) for model, upstream in UPSTREAM.items()}


async def _fire(session: aiohttp.ClientSession, url: str, key: str, model: str) -> tuple[int | str, float]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    started = time.monotonic()
    try:
        async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
            await resp.read()
            return resp.status, time.monotonic() - started
    except (aiohttp.ClientError, TimeoutError) as exc:  # a hang shows up here as TimeoutError
        return type(exc).__name__, time.monotonic() - started


async def _storm(gateway: Gateway, models: list[str]) -> tuple[list[tuple[int | str, float]], Counter[int | str]]:
    """Fire one request per entry of models, all at once, while probing /health."""
    url = f"{gateway.url}/v1/chat/completions"
    health: Counter[int | str] = Counter()
    done = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as storm_client,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as probe_client,
    ):

        async def probe() -> None:
            for _ in range(10_000):  # bounded; ends when the storm is over
                try:
                    async with probe_client.get(f"{gateway.url}/health") as resp:
                        await resp.read()
                        health[resp.status] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    health[type(exc).__name__] += 1
                if done.is_set():
                    return
                await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        results = await asyncio.gather(*(_fire(storm_client, url, gateway.api_key, m) for m in models))
        done.set()
        await asyncio.wait_for(prober, timeout=10)
    return results, health


async def test_429_storm_ends_every_request_and_spares_the_upstream(
    storm_gateway: tuple[Gateway, MockUpstream],
) -> None:
    gateway, mock = storm_gateway
    before = _upstream_calls(mock)
    models = ["storm-a", "storm-solo"] * (STORM // 2)

    results, health = await _storm(gateway, models)

    statuses = Counter(status for status, _ in results)
    slowest = max(seconds for _, seconds in results)
    after = _upstream_calls(mock)
    calls = {m: after[m] - before[m] for m in after}
    total_calls = sum(calls.values())
    naive = STORM * (1 + MAX_RETRIES)
    print(
        f"\n429 storm: {STORM} requests -> statuses {dict(statuses)}, slowest {slowest:.2f}s, "
        f"/health {dict(health)}, upstream calls {calls} = {total_calls} (naive bound {naive})"
    )
    assert set(statuses) <= {429, 503}, f"every request must end with 429 or 503, got {dict(statuses)}"
    assert sum(statuses.values()) == STORM
    # measured by the client across 500 connections on 2 cores: the deadline plus SLACK_S
    # (a request the gateway forgot would end at the client timeout, 5 s past the deadline)
    assert slowest <= TOTAL_TIMEOUT_MS / 1000 + SLACK_S, (
        f"a request took {slowest:.2f}s, past its {TOTAL_TIMEOUT_MS} ms deadline"
    )
    assert health and set(health) == {200}, f"/health must keep answering 200 during the storm, got {dict(health)}"
    assert total_calls < naive, f"{total_calls} upstream calls: retries were not bounded by the breaker/retry budget"
    # the fallback link is only reached by requests that left storm-a, never more often than that
    assert calls["storm-b"] <= STORM // 2 * (1 + MAX_RETRIES)


async def test_after_the_storm_the_open_breaker_keeps_the_upstream_quiet(
    storm_gateway: tuple[Gateway, MockUpstream],
) -> None:
    gateway, mock = storm_gateway
    # the storm (or this warm-up, if run alone) has failed far more than the threshold of 5 requests
    await _storm(gateway, ["storm-solo"] * 20)
    before = _upstream_calls(mock)["storm-solo"]

    results, health = await _storm(gateway, ["storm-solo"] * 100)

    statuses = Counter(status for status, _ in results)
    print(
        f"\nafter the storm: statuses {dict(statuses)}, upstream calls {_upstream_calls(mock)['storm-solo'] - before}"
    )
    assert statuses == Counter({503: 100}), f"an open breaker answers 503 circuit_open at once, got {dict(statuses)}"
    assert _upstream_calls(mock)["storm-solo"] == before, "an open breaker must not call the upstream"
    assert set(health) == {200}
