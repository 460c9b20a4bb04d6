"""A 5xx that is really the caller's mistake (docs/errors.md#validation-5xx), end to end.

llama-cpp-python answers a malformed request with 500 and a validation message. One
caller sending such requests must get its error back at once, and must not open the
provider's breaker for everyone else. A plain 500 on the same configuration still does
(the control), so the threshold is really live here.
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest

CONFIG = """
resilience:
  max_retries: 2
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 2
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: vfail
    provider: mock
    upstream_model: up-vfail
    capabilities: [chat]
    fallbacks: [vfail-fb]
  - id: vfail-fb
    provider: mock
    upstream_model: up-vfail-fb
    capabilities: [chat]
  - id: plain500
    provider: mock
    upstream_model: up-plain500
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""

# What llama-cpp-python 0.3 sends for `"messages": "hi"` (a string, not a list).
LLAMA_CPP_VALIDATION_500 = (
    "{\"error\":{\"message\":\"1 validation error:\\n  {'type': 'list_type', 'loc': ('body', 'messages'), "
    "'msg': 'Input should be a valid list', 'input': 'hi'}\\n\\n  File \\\"VENV/lib/python3.11/site-packages/"
    'llama_cpp/server/app.py\\", line 376, in create_chat_completion\\n    POST /v1/chat/completions",'
    '"type":"internal_server_error","param":null,"code":null}}'
)
THRESHOLD = 2


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


@pytest.fixture(scope="module")
def http(gw):
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as c:
        yield c


def chat(http: httpx.Client, model: str) -> httpx.Response:
    return http.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def metric(gw, name: str, **labels: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_validation_500_is_answered_once_as_a_client_error_and_never_opens_the_breaker(gw, http, mock_upstream):
    mock_upstream.script("up-vfail", [], then={"status": 500, "body": LLAMA_CPP_VALIDATION_500})
    rounds = THRESHOLD * 3
    # other tests of this module use the same model: count from here (any test order)
    calls_before, fallback_before = mock_upstream.count("up-vfail"), mock_upstream.count("up-vfail-fb")
    attempts_before = metric(
        gw, "switchboard_upstream_attempts_total", model="vfail", outcome="upstream_invalid_request"
    )
    for _ in range(rounds):
        response = chat(http, "vfail")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "upstream_client_error"
        assert "validation error" in error["message"]  # the upstream's own error object, relayed
        assert response.headers["x-switchboard-attempts"] == "1"
        assert response.headers["x-switchboard-model-used"] == "vfail"
    assert mock_upstream.count("up-vfail") - calls_before == rounds  # one call per request: no retry
    assert mock_upstream.count("up-vfail-fb") == fallback_before  # and no fallback

    # the breaker stayed closed: the provider serves the next (valid) request itself
    mock_upstream.script("up-vfail", [], then={"status": 200})
    response = chat(http, "vfail")
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "vfail"
    assert "x-switchboard-fallback" not in response.headers
    assert metric(gw, "switchboard_circuit_state", provider="mock", model="vfail") == 0
    attempts = metric(gw, "switchboard_upstream_attempts_total", model="vfail", outcome="upstream_invalid_request")
    assert attempts - attempts_before == rounds


def test_the_official_client_sees_a_bad_request(gw, mock_upstream):
    mock_upstream.script("up-vfail", [], then={"status": 500, "body": LLAMA_CPP_VALIDATION_500})
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)
    with pytest.raises(openai.BadRequestError) as excinfo:
        client.chat.completions.create(model="vfail", messages=[{"role": "user", "content": "hi"}])
    assert excinfo.value.status_code == 400
    assert "Input should be a valid list" in str(excinfo.value)


def test_control_a_plain_500_still_opens_the_breaker(http, mock_upstream):
    mock_upstream.script("up-plain500", [], then={"status": 500, "body": "Internal Server Error"})
    for _ in range(THRESHOLD):
        assert chat(http, "plain500").json()["error"]["code"] == "upstream_error"
    assert mock_upstream.count("up-plain500") == THRESHOLD * 3  # every request retried twice
    response = chat(http, "plain500")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "circuit_open"
