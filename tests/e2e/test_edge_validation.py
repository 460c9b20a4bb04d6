"""Hostile input at the edge, end to end: a real server (daphne or uvicorn) and the real mock upstream.

The mock is scripted to answer every request 500, as a real OpenAI-compatible server
does for a malformed body: any malformed request that slipped through would show up
as an upstream call, a retry storm and, after three requests, an open breaker for
every organisation. Each test checks the mock's own hit counter.
"""

from __future__ import annotations

import socket

import httpx
import orjson
import pytest

CONFIG = """
resilience:
  max_retries: 2
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 3
  breaker_cooldown_s: 60
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
  - name: claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
models:
  - id: edge-chat
    provider: mock
    upstream_model: up-edge-chat
    capabilities: [chat, streaming, tools, structured_output, vision]
    fallbacks: [edge-fb]
  - id: edge-fb
    provider: mock
    upstream_model: up-edge-fb
    capabilities: [chat, streaming, tools, structured_output, vision]
  - id: edge-embed
    provider: mock
    upstream_model: up-edge-embed
    capabilities: [embeddings]
  - id: edge-rerank
    provider: mock
    upstream_model: up-edge-rerank
    capabilities: [rerank]
  - id: edge-resp
    provider: mock
    upstream_model: up-edge-resp
    capabilities: [responses]
  - id: edge-claude
    provider: claude
    upstream_model: up-edge-claude
    capabilities: [chat, streaming, tools]
  - id: edge-capped
    provider: mock
    upstream_model: up-edge-capped
    capabilities: [chat]
    max_output_tokens: 100
  - id: edge-capped-fb
    provider: mock
    upstream_model: up-edge-capped-fb
    capabilities: [chat]
    max_output_tokens: 100
    fallbacks: [edge-big]
  - id: edge-big
    provider: mock
    upstream_model: up-edge-big
    capabilities: [chat]
    max_output_tokens: 4000
orgs:
  - name: acme
    agents:
      - name: bot
"""
UPSTREAMS = [
    "up-edge-chat",
    "up-edge-fb",
    "up-edge-embed",
    "up-edge-rerank",
    "up-edge-resp",
    "up-edge-claude",
    "up-edge-capped",
    "up-edge-capped-fb",
    "up-edge-big",
]
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    for name in UPSTREAMS:
        mock_upstream.script(name, [], then={"status": 500})
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


@pytest.fixture(scope="module")
def http(gw):
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {gw.api_key}"}, timeout=20) as c:
        yield c


def upstream_calls(mock_upstream) -> dict[str, int]:
    return {name: mock_upstream.count(name) for name in UPSTREAMS}


MALFORMED = [
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "temperature": "x"}, "temperature"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": [{"role": 5, "content": "hi"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "stop": 5}, "stop"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "response_format": 5}, "response_format"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "top_p": "high"}, "top_p"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": [{"content": "hi"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "max_tokens": -5}, "max_tokens"),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "n": 0}, "n"),
    (
        "/v1/chat/completions",
        {"model": "edge-chat", "messages": USER, "tools": [{"type": "function"}]},
        "tools[0].function",
    ),
    ("/v1/chat/completions", {"model": "edge-chat", "messages": USER, "logit_bias": {"x": 1}}, "logit_bias"),
    ("/v1/embeddings", {"model": "edge-embed", "input": ["a", 5]}, "input[1]"),
    ("/v1/embeddings", {"model": "edge-embed", "input": "a", "dimensions": -1}, "dimensions"),
    ("/v1/embeddings", {"model": "edge-embed", "input": "a", "encoding_format": "int8"}, "encoding_format"),
    ("/v1/rerank", {"model": "edge-rerank", "query": "q", "documents": ["a", 3]}, "documents[1]"),
    ("/v1/rerank", {"model": "edge-rerank", "query": "q", "documents": ["a"], "top_n": -1}, "top_n"),
    ("/v1/responses", {"model": "edge-resp", "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ("/v1/responses", {"model": "edge-resp", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ("/v1/chat/completions", {"model": "edge-claude", "messages": USER, "stop": 5}, "stop"),
    (
        "/v1/chat/completions",
        {"model": "edge-claude", "messages": [*USER, {"role": "assistant", "content": None, "tool_calls": 5}]},
        "messages[1].tool_calls",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "param"), MALFORMED, ids=[f"{p}-{i}" for i, (_, _, p) in enumerate(MALFORMED)]
)
def test_malformed_body_is_400_naming_the_field_without_any_upstream_call(http, mock_upstream, path, body, param):
    before = upstream_calls(mock_upstream)
    variants = [({}, body)]
    if path == "/v1/chat/completions":
        variants += [({}, {**body, "stream": True}), ({"Idempotency-Key": f"edge-{param}"}, body)]
    for headers, payload in variants:
        response = http.post(path, json=payload, headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_request", param)
        assert response.headers["content-type"].startswith("application/json")
    assert upstream_calls(mock_upstream) == before


def test_many_bad_requests_leave_the_breaker_closed_for_everyone(http, mock_upstream):
    bad = {"model": "edge-chat", "messages": [{"role": 5, "content": "hi"}], "temperature": "x"}
    for _ in range(20):
        assert http.post("/v1/chat/completions", json=bad).status_code == 400
    assert upstream_calls(mock_upstream)["up-edge-chat"] == 0
    mock_upstream.script("up-edge-chat", [], then={"status": 200})
    try:
        response = http.post("/v1/chat/completions", json={"model": "edge-chat", "messages": USER})
    finally:
        mock_upstream.script("up-edge-chat", [], then={"status": 500})
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "edge-chat"
    assert response.headers["x-switchboard-attempts"] == "1"
    assert "x-switchboard-fallback" not in response.headers


def _deep(levels: int, prefix: bytes) -> bytes:
    return b"{" + prefix + b', "extra": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize(
    ("path", "prefix", "headers"),
    [
        ("/v1/chat/completions", b'"model": "edge-chat", "messages": [{"role": "user", "content": "hi"}]', {}),
        (
            "/v1/chat/completions",
            b'"model": "edge-chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]',
            {},
        ),
        (
            "/v1/chat/completions",
            b'"model": "edge-chat", "messages": [{"role": "user", "content": "hi"}]',
            {"Idempotency-Key": "edge-deep"},
        ),
        ("/v1/chat/completions", b'"model": "edge-claude", "messages": [{"role": "user", "content": "hi"}]', {}),
        ("/v1/embeddings", b'"model": "edge-embed", "input": "a"', {}),
        ("/v1/responses", b'"model": "edge-resp", "input": "a"', {}),
    ],
)
@pytest.mark.parametrize("levels", [254, 1000])
def test_deeply_nested_body_is_400_not_500(http, mock_upstream, path, prefix, headers, levels):
    before = upstream_calls(mock_upstream)
    response = http.post(path, content=_deep(levels, prefix), headers={"content-type": "application/json", **headers})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", "extra")
    assert "nested more than 254 levels" in error["message"]
    assert upstream_calls(mock_upstream) == before


def test_tool_arguments_too_deep_for_the_anthropic_encoder_are_400(http, mock_upstream):
    """Arguments are a JSON string the edge cannot see into; the dialect decodes and re-encodes them."""
    arguments = "[" * 300 + "]" * 300
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    response = http.post("/v1/chat/completions", json={"model": "edge-claude", "messages": messages})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert mock_upstream.count("up-edge-claude") == 0


@pytest.mark.parametrize("order", ["bad-then-good", "good-then-bad", "good-twice"])
def test_two_authorization_headers_are_400(gw, order):
    good, bad = f"Bearer {gw.api_key}", "Bearer sb-not-a-key"
    pair = {"bad-then-good": (bad, good), "good-then-bad": (good, bad), "good-twice": (good, good)}[order]
    body = orjson.dumps({"model": "edge-chat", "messages": USER})
    headers = [("Authorization", pair[0]), ("Authorization", pair[1]), ("Content-Type", "application/json")]
    response = httpx.post(f"{gw.url}/v1/chat/completions", content=body, headers=headers, timeout=20)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and "exactly one" in error["message"]


def _raw_request(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return int(lines[0].split()[1]), headers, body


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, rest = data.partition(b"\r\n")
        length = int(size.split(b";")[0], 16)
        if length == 0:
            break
        out += rest[:length]
        data = rest[length + 2 :]
    return out


@pytest.mark.parametrize(
    "path",
    [
        "/v1",
        "/v1/",
        "/V1",
        "/V1/chat/completions",
        "//v1/chat/completions",
        "/v1//chat/completions",
        "/v1/chat/completions/",
        "/v1/nope",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_every_v1_path_variant_answers_json_404_naming_the_endpoints(gw, path, method):
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {gw.api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    ).encode()
    status, headers, body = _raw_request(gw.port, request)
    assert status == 404
    assert headers["content-type"].startswith("application/json")
    error = orjson.loads(body)["error"]
    assert error["code"] == "not_found"
    assert "/v1/chat/completions" in error["message"] and "/v1/models" in error["message"]


def test_max_tokens_over_the_models_limit_is_400_naming_it_without_an_upstream_call(http, mock_upstream):
    response = http.post("/v1/chat/completions", json={"model": "edge-capped", "messages": USER, "max_tokens": 500})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_capability" and error["param"] == "max_tokens"
    assert "max_output_tokens 100" in error["message"]
    assert mock_upstream.count("up-edge-capped") == 0


def test_max_completion_tokens_over_the_limit_moves_to_a_fallback_that_can(http, mock_upstream):
    mock_upstream.script("up-edge-big", [], then={"status": 200})
    try:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "edge-capped-fb", "messages": USER, "max_tokens": 50, "max_completion_tokens": 500},
        )
    finally:
        mock_upstream.script("up-edge-big", [], then={"status": 500})
    assert response.status_code == 200
    assert response.headers["x-switchboard-model-used"] == "edge-big"
    assert response.headers["x-switchboard-fallback"] == "unsupported_capability"
    assert mock_upstream.count("up-edge-capped-fb") == 0


@pytest.fixture(scope="module")
def fuzz_gw(make_gateway, mock_upstream):
    from bench import fuzz

    return make_gateway(fuzz.CONFIG.format(mock=mock_upstream.url), org=fuzz.ORG, agent=fuzz.AGENT)


def test_the_fuzzer_gets_no_500_from_a_real_server(fuzz_gw):
    """bench/fuzz.py, bounded, against this run's server: bad JSON, wrong types, depth, odd paths and headers."""
    from bench import fuzz

    lines: list[str] = []
    failures = fuzz.fuzz(fuzz_gw.url, fuzz_gw.api_key, 400, seed=7, timeout=2.0, log=lines.append)
    assert failures == 0, "\n".join(lines)
    assert "Traceback" not in fuzz_gw.logs()


def test_the_field_path_fuzzer_gets_no_5xx_from_a_real_server(fuzz_gw):
    """bench/fieldfuzz.py, a seeded sample of 400 of its ~54 000 cases (the full run is a step of make bench).

    Seed 1 includes Anthropic content blocks whose `type` is a list or an object, which
    answered 500 before (docs/testing.md#field-fuzzer).
    """
    from bench import fieldfuzz

    lines: list[str] = []
    result = fieldfuzz.run(
        fuzz_gw.url, fuzz_gw.api_key, fieldfuzz.sample(400, seed=1), timeout=10.0, workers=2, log=lines.append
    )
    assert result["cases"] == 400 and result["failures"] == 0 and result["alive"], "\n".join(lines)
    assert "Traceback" not in fuzz_gw.logs()
