"""Bodies in usage records: only for orgs with log_bodies, never a header, masked and cut (docs/operations.md#bodies)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.observe import bodies
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application


@pytest.fixture
def records(monkeypatch) -> list[dict]:
    seen: list[dict] = []
    monkeypatch.setattr(current().usage, "record", lambda **kw: seen.append(kw))
    return seen


async def send(upstream: str, log_bodies: bool, payload: dict) -> httpx.Response:
    doc = document(upstream)
    doc["orgs"][0]["log_bodies"] = log_bodies
    previous = live.current()
    live.swap(build_snapshot(doc, key_rows(), {}, version=1))
    try:
        transport = httpx.ASGITransport(app=gateway_application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers={"Authorization": f"Bearer {API_KEY}"}
        ) as client:
            return await client.post("/v1/chat/completions", json=payload)
    finally:
        live.swap(previous)
        from routing.runtime.process import current

        upstream_transport = current().transport

        await upstream_transport.aclose()


CHAT = {"model": "chat-b", "messages": [{"role": "user", "content": "remember the word pelican"}]}


async def test_bodies_are_kept_only_when_the_org_opted_in(upstream, records):
    response = await send(upstream, False, CHAT)
    assert response.status_code == 200
    assert "request_body" not in records[-1] and "response_body" not in records[-1]

    response = await send(upstream, True, {**CHAT, "metadata": {"api_key": "sk-client-secret-1", "note": "x"}})
    assert response.status_code == 200
    row = records[-1]
    assert "pelican" in row["request_body"] and orjson.loads(row["request_body"])["metadata"]["note"] == "x"
    assert "sk-client-secret-1" not in row["request_body"] and '"api_key": "***"' in row["request_body"].replace(
        '":"', '": "'
    )
    assert row["response_body"] == response.text  # the answer as the client got it
    assert API_KEY not in orjson.dumps(row).decode()  # the Authorization header is never stored


async def test_stored_bodies_are_cut_to_the_configured_size(upstream, records, settings):
    settings.SWITCHBOARD_LOG_BODY_BYTES = 64
    response = await send(upstream, True, {**CHAT, "user": "u" * 500})
    assert response.status_code == 200
    body = records[-1]["request_body"]
    assert body.startswith('{"model":"chat-b"') and "[cut at 64 bytes of" in body and len(body) < 120


async def test_the_global_setting_keeps_every_orgs_bodies(upstream, records, settings):
    settings.SWITCHBOARD_LOG_BODIES = True
    assert (await send(upstream, False, CHAT)).status_code == 200
    assert "pelican" in records[-1]["request_body"]


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (b'{"password": "hunter2", "max_tokens": 5}', b'{"password": "***", "max_tokens": 5}'),
        (b'{"x-api-key":"k\\"q", "prompt_tokens": 3}', b'{"x-api-key":"***", "prompt_tokens": 3}'),
        (b'{"Authorization": "Bearer sk-1"}', b'{"Authorization": "***"}'),
        (b'{"token": "t"}', b'{"token": "***"}'),
        (b"\xff not utf-8", "\ufffd not utf-8".encode()),
    ],
)
def test_capture_masks_credential_values(raw, kept, settings):
    settings.SWITCHBOARD_LOG_BODY_BYTES = 1000
    assert bodies.capture(raw) == kept.decode()
