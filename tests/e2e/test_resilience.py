"""Resilience end to end: real server (daphne or uvicorn), real mock upstream, the official openai client.

Every scenario uses its own upstream model name, so the mock's scripts and the
gateway's breakers of one test never touch another's.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import openai
import pytest

CONFIG = """
resilience:
  max_retries: 2
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 3
  breaker_cooldown_s: 1
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
    api_key_env: SWITCHBOARD_UPSTREAM_E2E
  - name: blackhole
    dialect: openai
    base_url: http://{bh_host}:{bh_port}/v1
    connect_timeout_ms: 300
models:
{models}
orgs:
  - name: acme
    agents:
      - name: bot
"""

MODELS = {
    "retry-a": {},
    "client-err": {"fallbacks": ["client-err-fb"]},
    "client-err-fb": {},
    "p5": {"fallbacks": ["p5-fb"]},
    "p5-fb": {},
    "brk": {"fallbacks": ["brk-fb"]},
    "brk-fb": {},
    "lonely": {},
    "probe": {},
    "nodone": {"fallbacks": ["nodone-fb"]},
    "nodone-fb": {},
    "empty": {"fallbacks": ["empty-fb"]},
    "empty-fb": {},
    "slow": {"fallbacks": ["slow-fb"], "first_token_timeout_ms": 300},
    "slow-fb": {},
    "slow-alone": {"first_token_timeout_ms": 300},
    "hang-total": {"total_timeout_ms": 400},
    "badjson": {"fallbacks": ["badjson-fb"]},
    "badjson-fb": {},
    "cancel-me": {},
    "quota": {"fallbacks": ["quota-fb"], "fallback_on": ["provider_error", "timeout"]},
    "quota-fb": {},
    "hole": {"provider": "blackhole"},
}


def _models_yaml() -> str:
    lines = []
    for model_id, extra in MODELS.items():
        lines.append(f"  - id: {model_id}")
        lines.append(f"    provider: {extra.get('provider', 'mock')}")
        lines.append(f"    upstream_model: up-{model_id}")
        lines.append("    capabilities: [chat, streaming, embeddings]")
        for key, value in extra.items():
            if key != "provider":
                lines.append(f"    {key}: {value}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def blackhole():
    from providers.mock.upstream import blackhole as make_blackhole

    hole = make_blackhole()
    yield hole
    hole.close()


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream, blackhole):
    config = CONFIG.format(
        mock=mock_upstream.url, bh_host=blackhole.host, bh_port=blackhole.port, models=_models_yaml()
    )
    return make_gateway(config, env={"SWITCHBOARD_UPSTREAM_E2E": "sk-upstream-e2e"})


@pytest.fixture(scope="module")
def client(gw):
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def http(gw):
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as c:
        yield c


def chat(http: httpx.Client, model: str, **extra) -> httpx.Response:
    return http.post(
        "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    )


def test_two_5xx_then_success_is_served_after_exactly_three_upstream_calls(client, mock_upstream):
    mock_upstream.script("up-retry-a", [{"status": 500}, {"status": 500}, {"status": 200}])
    raw = client.chat.completions.with_raw_response.create(
        model="retry-a", messages=[{"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert raw.headers["x-switchboard-attempts"] == "3"
    assert raw.headers["x-switchboard-model-used"] == "retry-a"
    assert "x-switchboard-fallback" not in raw.headers
    assert mock_upstream.count("up-retry-a") == 3


def test_upstream_400_is_returned_at_once_without_retry_or_fallback(client, mock_upstream):
    mock_upstream.script(
        "up-client-err",
        [],
        then={
            "status": 400,
            "body": '{"error": {"message": "bad temperature", "type": "invalid_request_error", "code": "bad_param"}}',
        },
    )
    with pytest.raises(openai.BadRequestError) as excinfo:
        client.chat.completions.create(model="client-err", messages=[{"role": "user", "content": "hi"}])
    assert excinfo.value.status_code == 400
    assert "bad temperature" in str(excinfo.value)
    assert mock_upstream.count("up-client-err") == 1
    assert mock_upstream.count("up-client-err-fb") == 0


def test_primary_always_503_fails_over_and_says_why(http, mock_upstream):
    mock_upstream.script("up-p5", [], then={"status": 503})
    response = chat(http, "p5")
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "p5-fb"
    assert response.headers["x-switchboard-fallback"] == "upstream_5xx"
    assert response.headers["x-switchboard-attempts"] == "4"  # 3 on the primary, 1 on the fallback
    assert response.headers["x-switchboard-provider-used"] == "mock"


def test_open_breaker_is_skipped_without_upstream_call_and_fallback_serves(http, mock_upstream):
    mock_upstream.script("up-brk", [], then={"status": 500})
    for _ in range(3):  # threshold: three failed requests
        assert chat(http, "brk").headers["x-switchboard-fallback"] == "upstream_5xx"
    calls_before = mock_upstream.count("up-brk")
    response = chat(http, "brk")
    assert response.status_code == 200
    assert response.headers["x-switchboard-fallback"] == "circuit_open"
    assert response.headers["x-switchboard-model-used"] == "brk-fb"
    assert mock_upstream.count("up-brk") == calls_before


def test_open_breaker_without_fallback_answers_503_circuit_open_with_retry_after(http, mock_upstream):
    mock_upstream.script("up-lonely", [], then={"status": 502})
    for _ in range(3):
        assert chat(http, "lonely").json()["error"]["code"] == "upstream_error"
    response = chat(http, "lonely")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "circuit_open"
    assert int(response.headers["retry-after"]) >= 1


def test_after_cooldown_exactly_one_probe_reaches_the_upstream_under_concurrency(gw, http, mock_upstream):
    mock_upstream.script("up-probe", [], then={"status": 500})
    for _ in range(3):
        chat(http, "probe")
    mock_upstream.script("up-probe", [], then={"status": 200, "delay_ms": 300})
    calls_before = mock_upstream.count("up-probe")
    time.sleep(1.1)  # the configured cooldown (1 s) passes for real: the server runs on the wall clock
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(lambda _: chat(http, "probe").status_code, range(20)))
    assert mock_upstream.count("up-probe") - calls_before == 1
    assert statuses.count(200) == 1
    assert statuses.count(503) == 19


def test_stream_missing_done_relays_frames_then_one_terminal_error_frame(client, mock_upstream):
    mock_upstream.script("up-nodone", [], then={"status": 200, "frames": 2, "no_done": True, "role_chunk": False})
    with pytest.raises(openai.APIError) as excinfo:
        chunks = []
        for chunk in client.chat.completions.create(
            model="nodone", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            chunks.append(chunk)
    # the mock's two content frames and its finish frame all arrived before the error frame
    assert [c.choices[0].delta.content for c in chunks] == ["tok0 ", "tok1 ", None]
    assert excinfo.value.body["code"] == "upstream_stream_error"
    assert mock_upstream.count("up-nodone-fb") == 0


def test_stream_relay_is_byte_identical_and_ends_with_done(http, mock_upstream):
    mock_upstream.script("up-nodone-fb", [], then={"status": 200, "frames": 3})
    direct = httpx.post(
        f"{mock_upstream.url}/v1/chat/completions", json={"model": "up-nodone-fb", "stream": True, "messages": []}
    ).content
    with http.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "nodone-fb", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = b"".join(response.iter_raw())
    assert body.rstrip().endswith(b"data: [DONE]")
    assert body == direct


def test_empty_stream_fails_over_before_commit(http, mock_upstream):
    mock_upstream.script("up-empty", [], then={"status": 200, "empty_stream": True})
    with http.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "empty", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as response:
        body = b"".join(response.iter_raw())
        assert response.headers["x-switchboard-model-used"] == "empty-fb"
        assert response.headers["x-switchboard-fallback"] == "empty_stream"
    assert body.rstrip().endswith(b"data: [DONE]")


def test_slow_first_token_fails_over(http, mock_upstream):
    mock_upstream.script("up-slow", [], then={"status": 200, "delay_ms": 2000})
    response = chat(http, "slow")
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "slow-fb"
    assert response.headers["x-switchboard-fallback"] == "first_token_timeout"


def test_slow_first_token_without_fallback_is_504_first_token_timeout(http, mock_upstream):
    mock_upstream.script("up-slow-alone", [], then={"status": 200, "delay_ms": 2000})
    response = chat(http, "slow-alone", stream=True)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "first_token_timeout"


def test_connect_to_a_listener_that_never_accepts_is_504_connect_timeout(http):
    started = time.monotonic()
    response = chat(http, "hole")
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "connect_timeout"
    assert time.monotonic() - started < 10  # 3 tries of 300 ms, not the 5 s default


def test_total_deadline_is_504_total_timeout(http, mock_upstream):
    mock_upstream.script("up-hang-total", [], then={"hang": True})
    response = chat(http, "hang-total")
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "total_timeout"


def test_2xx_with_invalid_json_is_502_upstream_error_and_never_retried(http, mock_upstream):
    mock_upstream.script("up-badjson", [], then={"status": 200, "invalid_json": True})
    response = chat(http, "badjson")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert mock_upstream.count("up-badjson") == 1
    assert mock_upstream.count("up-badjson-fb") == 0


def test_429_not_in_fallback_on_ends_with_upstream_rate_limited_and_retry_after(http, mock_upstream):
    mock_upstream.script("up-quota", [], then={"status": 429, "headers": {"Retry-After": "0"}})
    response = chat(http, "quota")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "upstream_rate_limited"
    assert "retry-after" in response.headers
    assert mock_upstream.count("up-quota-fb") == 0


def test_client_disconnect_mid_stream_closes_the_upstream_connection(gw, mock_upstream):
    mock_upstream.script("up-cancel-me", [], then={"status": 200, "frames": 200, "frame_delay_ms": 50})
    with httpx.Client(base_url=gw.url, timeout=20) as c:
        with c.stream(
            "POST",
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {gw.api_key}"},
            json={"model": "cancel-me", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        ) as response:
            first = next(response.iter_raw())
            assert first.startswith(b"data: ")
    # the client is gone; the gateway must abort the upstream promptly
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and mock_upstream.calls("up-cancel-me").get("disconnected", 0) < 1:
        time.sleep(0.05)
    assert mock_upstream.calls("up-cancel-me")["disconnected"] == 1
    assert mock_upstream.count("up-cancel-me") == 1


def test_openai_client_error_mapping(gw, mock_upstream):
    bad = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as excinfo:
        bad.chat.completions.create(model="retry-a", messages=[{"role": "user", "content": "hi"}])
    assert excinfo.value.body["code"] == "invalid_api_key"
    good = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as excinfo:
        good.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert excinfo.value.body["code"] == "model_not_found"


def test_embeddings_through_the_openai_client(client, mock_upstream):
    result = client.embeddings.create(model="retry-a", input=["one", "two"])
    assert len(result.data) == 2
    assert isinstance(result.data[0].embedding[0], float)


def test_upstream_received_the_platform_key_and_the_upstream_model_name(http, mock_upstream):
    chat(http, "p5-fb")
    received = mock_upstream.calls("up-p5-fb")["requests"][-1]
    headers = {k.lower(): v for k, v in received["headers"].items()}
    assert headers["authorization"] == "Bearer sk-upstream-e2e"
    assert received["body"]["model"] == "up-p5-fb"
