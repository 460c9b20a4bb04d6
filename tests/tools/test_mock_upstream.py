"""The mock upstream's control API: scripts per model, call records, disconnects, CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from routing.upstream.dialects import get_dialect
from tests.upstream.conftest import provider

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client():
    async with aiohttp.ClientSession() as session:
        yield session


async def chat(client, mock, model: str, **extra) -> aiohttp.ClientResponse:
    resp = await client.post(mock.root + "/v1/chat/completions", json={"model": model, "messages": [], **extra})
    await resp.read()
    return resp


async def test_steps_run_in_order_then_the_then_behaviour_applies(mock, client):
    script = {
        "model": "m1",
        "steps": [{"status": 500}, {"status": 429, "headers": {"Retry-After": "1"}}, {"status": 200}],
        "then": {"status": 503},
    }
    r = await client.post(mock.root + "/_control/script", json=script)
    assert r.status == 200
    statuses = [(await chat(client, mock, "m1")).status for _ in range(5)]
    assert statuses == [500, 429, 200, 503, 503]
    assert (await chat(client, mock, "other")).status == 200  # scripts are per model


async def test_steps_without_then_fall_back_to_normal_answers(mock, client):
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": [{"status": 502}]})
    first, second = await chat(client, mock, "m1"), await chat(client, mock, "m1")
    assert (first.status, second.status) == (502, 200)
    assert orjson.loads(await second.read())["model"] == "m1"


async def test_a_script_with_when_applies_only_to_the_matching_requests(mock, client):
    by_user = {"model": "m1", "when": {"field": "user", "equals": "a"}, "then": {"status": 500}}
    by_header = {"model": "m1", "when": {"header": "X-Caller", "equals": "c"}, "steps": [{"status": 429}]}
    for script in (by_user, by_header):
        assert (await client.post(mock.root + "/_control/script", json=script)).status == 200
    assert (await chat(client, mock, "m1", user="a")).status == 500
    assert (await chat(client, mock, "m1", user="b")).status == 200  # others answer normally
    resp = await client.post(
        mock.root + "/v1/chat/completions", json={"model": "m1", "messages": []}, headers={"X-Caller": "c"}
    )
    assert resp.status == 429
    bad = await client.post(mock.root + "/_control/script", json={"model": "m1", "when": {"field": "user"}})
    assert bad.status == 400


async def test_retry_after_header_and_raw_body_are_sent_as_scripted(mock, client):
    steps = [{"status": 429, "headers": {"Retry-After": "3"}, "body": "slow down"}]
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": steps})
    resp = await chat(client, mock, "m1")
    assert resp.headers["Retry-After"] == "3" and await resp.read() == b"slow down"


async def test_calls_record_path_headers_and_body_per_model(mock, client):
    await client.post(
        mock.root + "/v1/chat/completions", json={"model": "m1", "x": 1}, headers={"Authorization": "Bearer byo-1"}
    )
    await chat(client, mock, "m2")
    r = await client.get(mock.root + "/_control/calls", params={"model": "m1"})
    calls = orjson.loads(await r.read())
    assert calls["count"] == 1 and calls["disconnected"] == 0 and calls["in_flight"] == 0
    assert calls["requests"][0]["path"] == "/v1/chat/completions"
    assert calls["requests"][0]["headers"]["Authorization"] == "Bearer byo-1"
    assert calls["requests"][0]["body"] == {"model": "m1", "x": 1}


async def test_reset_forgets_scripts_and_records(mock, client):
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": [{"status": 500}]})
    await chat(client, mock, "m2")
    await client.post(mock.root + "/_control/reset")
    assert (await chat(client, mock, "m1")).status == 200
    calls = orjson.loads(await (await client.get(mock.root + "/_control/calls?model=m2")).read())
    assert calls["count"] == 0


async def test_malformed_script_is_refused(mock, client):
    r = await client.post(mock.root + "/_control/script", json={"steps": []})
    assert r.status == 400
    r = await client.post(mock.root + "/_control/script", json={"model": "m", "steps": [1]})
    assert r.status == 400


async def test_client_giving_up_during_delay_is_recorded_as_disconnect(mock, client):
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": [{"delay_ms": 60000}]})
    with pytest.raises(asyncio.TimeoutError):
        await client.post(
            mock.root + "/v1/chat/completions", json={"model": "m1"}, timeout=aiohttp.ClientTimeout(total=0.1)
        )
    await mock.state.wait_disconnected("m1")
    calls = orjson.loads(await (await client.get(mock.root + "/_control/calls?model=m1")).read())
    assert calls["disconnected"] == 1 and calls["in_flight"] == 0


async def test_stream_shapes(mock, client):
    steps = [{"empty_stream": True}, {"frames": 2, "no_done": True}, {"frames": 1}, {"invalid_json": True}]
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": steps})
    bodies = []
    for _ in range(4):
        r = await client.post(mock.root + "/v1/chat/completions", json={"model": "m1", "stream": True})
        bodies.append((r.status, r.headers.get("Content-Type", ""), await r.read()))
    assert bodies[0][:2] == (200, "text/event-stream") and bodies[0][2] == b""
    # role-only first chunk + the content frames + the final finish_reason chunk
    assert bodies[1][2].count(b"chat.completion.chunk") == 4 and b"[DONE]" not in bodies[1][2]
    assert bodies[2][2].count(b"chat.completion.chunk") == 3 and bodies[2][2].endswith(b"data: [DONE]\n\n")
    assert bodies[3][0] == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(bodies[3][2])


async def test_streams_open_with_the_role_only_chunk_real_servers_send(mock, client):
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": [{}, {"role_chunk": False}]})
    first = await (await client.post(mock.root + "/v1/chat/completions", json={"model": "m1", "stream": True})).read()
    frames = [orjson.loads(f[6:]) for f in first.split(b"\n\n") if f.startswith(b"data: {")]
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert frames[1]["choices"][0]["delta"] == {"content": "tok0 "}
    plain = await (await client.post(mock.root + "/v1/chat/completions", json={"model": "m1", "stream": True})).read()
    assert b'"role"' not in plain and plain.startswith(b'data: {"id":"chatcmpl-mock"')


async def test_break_after_drops_the_connection_mid_stream(mock, client):
    await client.post(mock.root + "/_control/script", json={"model": "m1", "steps": [{"frames": 4, "break_after": 1}]})
    r = await client.post(mock.root + "/v1/chat/completions", json={"model": "m1", "stream": True})
    with pytest.raises(aiohttp.ClientPayloadError):
        await r.read()


async def test_models_lists_the_models_seen(mock, client):
    await chat(client, mock, "seen-model")
    data = orjson.loads(await (await client.get(mock.root + "/v1/models")).read())
    assert [m["id"] for m in data["data"]] == ["seen-model"]


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "tei", "cohere"])
async def test_each_dialect_health_url_answers_200_on_the_mock(mock, client, dialect):
    url = get_dialect(dialect).health_url(provider(dialect=dialect, base_url=mock.base(dialect)))
    assert (await client.get(url)).status == 200


def test_module_runs_standalone_without_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.mock.upstream", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("mock upstream listening on http://127.0.0.1:"), proc.stderr.read() if not line else line
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    probe = "import sys, tools.mock.upstream; print(any(m.startswith('django') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"properties": {}}, "tools.0.custom.input_schema.type: Field required"),
        ({"type": ["object", "null"]}, "tools.0.custom.input_schema.type: Input should be 'object'"),
        ([{"type": "object"}], "tools.0.custom.input_schema: Input should be a valid dictionary"),
    ],
)
async def test_a_tool_schema_anthropic_refuses_is_a_400_as_from_the_real_api_not_a_500(mock, client, schema, words):
    """The field fuzzer sent such tools through the gateway's Messages relay; the mock failed with 500 where the
    real API answers 400 invalid_request_error, and the gateway rightly called that an upstream failure (502)."""
    body = {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "t", "input_schema": schema}],
        "tool_choice": {"type": "any"},
    }
    resp = await client.post(mock.root + "/anthropic/v1/messages", json=body)
    assert resp.status == 400
    assert await resp.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": words}}
    body["tools"] = [{"name": "t", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    resp = await client.post(mock.root + "/anthropic/v1/messages", json=body)
    assert resp.status == 200 and (await resp.json())["content"][0]["type"] == "tool_use"
