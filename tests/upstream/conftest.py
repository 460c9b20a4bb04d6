"""Fixtures: the mock upstream in-process on an ephemeral port, a fresh transport, specs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from routing.config.snapshot import ModelSpec, ProviderSpec, Timeouts
from routing.core.failures import failure_from_response
from routing.upstream.dialects import get_dialect
from routing.upstream.dialects.base import ParsedResponse
from routing.upstream.transport import Transport
from tools.mock.upstream import MockState, start_mock, state_of

MOUNTS = {"openai": "/v1", "ollama": "/v1", "anthropic": "/anthropic/v1", "tei": "/tei", "cohere": "/cohere/v2"}


@dataclass
class Mock:
    root: str
    state: MockState

    def base(self, dialect: str) -> str:
        return self.root + MOUNTS[dialect]


@pytest.fixture
async def mock() -> AsyncIterator[Mock]:
    runner, port = await start_mock()
    try:
        yield Mock(f"http://127.0.0.1:{port}", state_of(runner))
    finally:
        await runner.cleanup()


@pytest.fixture
async def transport() -> AsyncIterator[Transport]:
    t = Transport()
    try:
        yield t
    finally:
        await t.aclose()


def provider(
    name: str = "p1", dialect: str = "openai", base_url: str = "http://127.0.0.1:9/v1", **kw: Any
) -> ProviderSpec:
    fields: dict[str, Any] = {
        "name": name,
        "dialect": dialect,
        "base_url": base_url,
        "api_key": None,
        "api_key_env": None,
        "connect_timeout_ms": None,
        "first_token_timeout_ms": None,
        "total_timeout_ms": None,
        "health_check_path": "",
        "health_probe": False,
    }
    fields.update(kw)
    return ProviderSpec(**fields)


def model(upstream: str = "up-model", prov: ProviderSpec | None = None, **kw: Any) -> ModelSpec:
    spec = ModelSpec(
        id="public/" + upstream,
        provider=prov or provider(),
        upstream_model=upstream,
        capabilities=frozenset({"chat", "streaming", "tools", "embeddings", "rerank", "responses"}),
        context_window=None,
        max_output_tokens=None,
        residency="",
        input_price_per_mtok=None,
        output_price_per_mtok=None,
        fallbacks=(),
        timeouts=Timeouts(connect_ms=2000, first_token_ms=5000, stream_idle_ms=5000, total_ms=10000),
        fallback_on=frozenset({"provider_error"}),
    )
    return replace(spec, **kw) if kw else spec


def model_at(mock: Mock, dialect: str, upstream: str = "up-model", **provider_kw: Any) -> ModelSpec:
    return model(upstream, provider(dialect=dialect, base_url=mock.base(dialect), **provider_kw))


async def call(
    transport: Transport,
    spec: ModelSpec,
    kind: str,
    body: dict[str, Any],
    api_key: str | None = None,
    base_url: str | None = None,
) -> ParsedResponse:
    """One non-streaming upstream call the way the gateway makes it; non-2xx raise UpstreamFailure."""
    dialect = get_dialect(spec.provider.dialect)
    prepared = dialect.build_request(kind, body, spec, base_url or spec.provider.base_url, api_key, False)
    resp = await transport.send(spec.provider, prepared.method, prepared.url, prepared.headers, prepared.body, 2.0)
    try:
        data = await resp.read()
    finally:
        await resp.close()
    if not 200 <= resp.status < 300:
        raise failure_from_response(resp.status, resp.headers, data)
    return dialect.parse_response(kind, data, spec, prepared.context)


async def stream(transport: Transport, spec: ModelSpec, body: dict[str, Any], api_key: str | None = None) -> bytes:
    """One streaming chat call through the dialect's stream translation; all client-facing bytes."""
    dialect = get_dialect(spec.provider.dialect)
    prepared = dialect.build_request("chat", body, spec, spec.provider.base_url, api_key, True)
    resp = await transport.send(spec.provider, prepared.method, prepared.url, prepared.headers, prepared.body, 2.0)
    out = bytearray()
    try:
        assert resp.status == 200, resp.status
        async for chunk in dialect.translate_stream(resp.iter_chunks(), spec):
            out += chunk
    finally:
        await resp.close()
    return bytes(out)


def sse_payloads(raw: bytes) -> list[bytes]:
    """The `data:` payloads of an SSE byte stream, in order."""
    return [e[6:] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
