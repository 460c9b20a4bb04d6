"""Two imports, then `config_rollback 1` in another process: the running server serves version 1 again
within the reload bound, and the history says who did what."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.e2e.harness import SLACK_S

BASE = """
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: first
    provider: mock
    upstream_model: hist-first
    capabilities: [chat]
{extra}
orgs:
  - name: acme
    agents:
      - name: bot
"""


def extra(*ids: str) -> str:
    return "\n".join(
        f"  - id: {i}\n    provider: mock\n    upstream_model: hist-{i}\n    capabilities: [chat]" for i in ids
    )


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(BASE.format(mock=mock_upstream.url, extra=""))


def model_ids(gw) -> set[str]:
    response = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=5)
    return {item["id"] for item in response.json()["data"]}


def wait_for_models(gw, wanted: set[str]) -> None:
    """Until the running server lists exactly `wanted` (bounded: the 1 s reload promise + SLACK_S)."""
    start = time.monotonic()
    while (seen := model_ids(gw)) != wanted:
        waited = time.monotonic() - start
        assert waited < 1.0 + SLACK_S, f"still serving {sorted(seen)} after {waited:.1f} s, wanted {sorted(wanted)}"
        time.sleep(0.02)


def test_rollback_in_another_process_is_served_and_recorded(gw, mock_upstream):
    wait_for_models(gw, {"first"})
    gw.import_config(BASE.format(mock=mock_upstream.url, extra=extra("second")))
    wait_for_models(gw, {"first", "second"})
    gw.import_config(BASE.format(mock=mock_upstream.url, extra=extra("second", "third")))
    wait_for_models(gw, {"first", "second", "third"})

    dry = gw.manage("config_rollback", "1", "--dry-run").stdout
    assert "- models[second]" in dry and "- models[third]" in dry and "Dry run, nothing saved" in dry
    assert model_ids(gw) == {"first", "second", "third"}

    out = gw.manage("config_rollback", "1").stdout
    assert "Rolled back to version 1: recorded as version 4" in out
    wait_for_models(gw, {"first"})
    chat = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}"},  # the agent's key survived the rollback
        json={"model": "first", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert chat.status_code == 200

    rows = json.loads(gw.manage("config_history", "--json").stdout)
    assert [(r["version"], r["source"]) for r in rows] == [
        (4, "rollback"),
        (3, "import_config"),
        (2, "import_config"),
        (1, "import_config"),
    ]
    assert [c["path"] for c in rows[0]["diff"]] == ["models[second]", "models[third]"]
    assert all(c["op"] == "removed" for c in rows[0]["diff"])
