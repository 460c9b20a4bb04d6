"""Hostile JSON on every /v1 endpoint (docs/request-validation.md#depth): a 400 `invalid_request`, never a
500; and a whole number written with a zero fraction served like the integer it is."""

from __future__ import annotations

import pytest

MESSAGES = [{"role": "user", "content": "hello"}]
BODIES = {
    "/v1/chat/completions": b'"model": "fast", "messages": [{"role": "user", "content": "hi"}]',
    "/v1/embeddings": b'"model": "embed-a", "input": "hi"',
    "/v1/completions": b'"model": "chat-a", "prompt": "hi"',
    "/v1/responses": b'"model": "chat-a", "input": "hi"',
    "/v1/rerank": b'"model": "chat-a", "query": "q", "documents": ["a"]',
    "/v1/messages": b'"model": "chat-a", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]',
    "/v1/messages/count_tokens": b'"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]',
}


@pytest.mark.parametrize("depth", [300, 1000, 5000])
@pytest.mark.parametrize("path", list(BODIES))
async def test_deeply_nested_metadata_is_a_400_on_every_endpoint(gateway, path, depth):
    deep = b'{"a": ' * depth + b"1" + b"}" * depth
    content = b"{" + BODIES[path] + b', "metadata": ' + deep + b"}"
    response = await gateway.post(path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    body = response.json()["error"]
    assert body.get("code", body.get("type")) in ("invalid_request", "invalid_request_error"), body


async def test_n_written_as_1_0_is_served(gateway):
    response = await gateway.post("/v1/chat/completions", json={"model": "fast", "messages": MESSAGES, "n": 1.0})
    assert response.status_code == 200, response.text
