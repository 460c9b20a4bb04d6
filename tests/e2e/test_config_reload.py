"""A configuration saved by another process is served by the running server within 1 s;
a configuration that fails validation is refused and the last good one keeps serving."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.e2e.harness import SLACK_S

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


def extra_model(model_id: str) -> str:
    return f"  - id: {model_id}\n    provider: mock\n    upstream_model: rl-{model_id}\n    capabilities: [chat]"


def wait_until_served(gw, model_id: str) -> float:
    """Seconds from now until the running server lists model_id (bounded: the promise + SLACK_S)."""
    saved_at = time.monotonic()
    while model_id not in model_ids(gw):
        waited = time.monotonic() - saved_at
        assert waited < 1.0 + SLACK_S, f"the running server did not serve {model_id} within {waited:.1f} s"
        time.sleep(0.02)
    return time.monotonic() - saved_at


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
    new = f"new-{uuid.uuid4().hex[:6]}"
    assert new not in model_ids(gw)
    assert chat(gw, new).status_code == 404
    gw.import_config(BASE.format(mock=mock_upstream.url, extra=extra_model(new)))
    wait_until_served(gw, new)
    assert chat(gw, new).status_code == 200


def test_breaker_state_of_unchanged_links_survives_a_rebuild(gw, mock_upstream):
    mock_upstream.script("rl-sticky", [], then={"status": 500})
    for _ in range(2):
        chat(gw, "sticky")
    assert chat(gw, "sticky").json()["error"]["code"] == "circuit_open"
    new = f"third-{uuid.uuid4().hex[:6]}"
    gw.import_config(BASE.format(mock=mock_upstream.url, extra=extra_model(new)))
    wait_until_served(gw, new)
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
