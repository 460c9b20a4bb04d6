"""The health probe authenticates exactly as the dialect's own requests do."""

from __future__ import annotations

import pytest

from routing.runtime.observe import health
from routing.upstream.dialects import DIALECTS, get_dialect
from tests.upstream.conftest import model, provider

SAMPLE_BODY = {"messages": [{"role": "user", "content": "hi"}], "input": "hi", "query": "q", "documents": ["a"]}


def _credentials(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() != "content-type"}


# Dialects that sign each request (the signature covers its URL and time): their probe is signed
# the same way, tested with the dialect (tests/upstream/test_bedrock_dialect.py).
SIGNING = frozenset({"bedrock"})


@pytest.mark.parametrize("name", sorted(n for n, d in DIALECTS.items() if not d.authorizes and n not in SIGNING))
def test_probe_sends_the_credentials_of_a_real_request(name: str) -> None:
    dialect = get_dialect(name)
    prov = provider(dialect=name, api_key="sk-probe")
    kind = sorted(dialect.kinds)[0]
    prepared = dialect.build_request(kind, dict(SAMPLE_BODY), model(prov=prov), prov.base_url, prov.api_key, False)
    assert health.health_headers(prov) == _credentials(prepared.headers)
    assert "sk-probe" in " ".join(health.health_headers(prov).values())


def test_anthropic_probe_uses_its_key_header_and_version() -> None:
    headers = health.health_headers(provider(dialect="anthropic", api_key="sk-ant"))
    assert headers["x-api-key"] == "sk-ant" and headers["anthropic-version"]
    assert "Authorization" not in headers


def test_a_provider_without_key_is_probed_without_credentials() -> None:
    assert health.health_headers(provider(dialect="openai")) == {}
