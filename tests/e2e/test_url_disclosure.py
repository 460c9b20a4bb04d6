"""API clients learn which provider failed, never where it lives (docs/security.md#urls).

A real server with one provider whose port nothing listens on: the client's error (OpenAI
and Anthropic shapes) names the provider and says what happened; the URL is in the
operators' log only.
"""

from __future__ import annotations

import socket

import httpx
import pytest

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: dead-internal
    dialect: openai
    base_url: http://127.0.0.1:{port}/internal-path/v1
models:
  - {{id: url-dead, provider: dead-internal, upstream_model: up-url-dead, capabilities: [chat]}}
orgs:
  - name: acme
    agents:
      - name: bot
"""


@pytest.fixture(scope="module")
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: nothing listens there


@pytest.fixture(scope="module")
def gw(make_gateway, closed_port):
    return make_gateway(CONFIG.format(port=closed_port))


def assert_no_address(message: str, port: int) -> None:
    assert "127.0.0.1" not in message and str(port) not in message
    assert "internal-path" not in message and "http" not in message


def test_an_unreachable_provider_is_named_without_its_url(gw, closed_port):
    answer = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": "url-dead", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {gw.api_key}"},
        timeout=20,
    )
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "upstream_error"
    assert "'dead-internal'" in error["message"] and "connection refused" in error["message"]
    assert_no_address(answer.text, closed_port)
    assert f"127.0.0.1:{closed_port}/internal-path/v1" in gw.logs()  # operators still see where


def test_the_anthropic_shaped_error_hides_the_url_too(gw, closed_port):
    answer = httpx.post(
        f"{gw.url}/v1/messages",
        json={"model": "url-dead", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": gw.api_key},
        timeout=20,
    )
    assert answer.status_code == 502
    assert "'dead-internal'" in answer.json()["error"]["message"]
    assert_no_address(answer.text, closed_port)
