"""A configuration saved by another process is served by the running server within 1 s;
a configuration that fails validation is refused and the last good one keeps serving."""

from __future__ import annotations

import time

import httpx
import pytest

BASE = """
resilience:
  max_retries: 0
  breaker_failure_threshold: 2
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: first
    provider: mock
    upstream_model: rl-first
    capabilities: [chat]
  - id: sticky
    provider: mock
    upstream_model: rl-sticky
    capabilities: [chat]
{extra}
orgs:
  - name: acme
    agents:
      - name: bot
"""

SECOND = """  - id: second
    provider: mock
    upstream_model: rl-second
    capabilities: [chat]"""


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(BASE.format(mock=mock_upstream.url, extra=""))


def model_ids(gw) -> set[str]:
    response = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=5)
    return {item["id"] for item in response.json()["data"]}


def chat(gw, model: str) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )


def test_import_in_another_process_is_served_within_one_second(gw, mock_upstream):
    assert model_ids(gw) == {"first", "sticky"}
    gw.import_config(BASE.format(mock=mock_upstream.url, extra=SECOND))
    saved_at = time.monotonic()
    while "second" not in model_ids(gw):
        assert time.monotonic() - saved_at < 1.0, "the running server did not pick up the new configuration within 1 s"
        time.sleep(0.02)
    assert chat(gw, "second").status_code == 200


def test_breaker_state_of_unchanged_links_survives_a_rebuild(gw, mock_upstream):
    mock_upstream.script("rl-sticky", [], then={"status": 500})
    for _ in range(2):
        chat(gw, "sticky")
    assert chat(gw, "sticky").json()["error"]["code"] == "circuit_open"
    gw.import_config(
        BASE.format(
            mock=mock_upstream.url,
            extra=SECOND
            + "\n  - id: third\n    provider: mock\n    upstream_model: rl-third\n    capabilities: [chat]",
        )
    )
    saved_at = time.monotonic()
    while "third" not in model_ids(gw):
        assert time.monotonic() - saved_at < 1.0
        time.sleep(0.02)
    assert chat(gw, "sticky").json()["error"]["code"] == "circuit_open"


def test_invalid_configuration_is_rejected_and_the_last_good_one_keeps_serving(gw):
    before = model_ids(gw)
    # Bypass validation the way a careless shell session would: a model that falls back to itself.
    gw.manage(
        "shell",
        "-c",
        "from providers.models import Model, FallbackLink; m = Model.objects.get(public_id='first'); "
        "FallbackLink.objects.create(model=m, target=m, position=0); "
        "Model.objects.create(public_id='ghost', provider=m.provider, upstream_model='g', capabilities=['chat'])",
    )
    time.sleep(1.5)
    assert model_ids(gw) == before  # 'ghost' is not served: the new configuration was refused
    assert chat(gw, "first").status_code == 200
    assert "configuration rejected" in gw.logs()
    check = gw.manage("check", check=False)
    assert check.returncode != 0
    assert "routing.E" in check.stderr + check.stdout
