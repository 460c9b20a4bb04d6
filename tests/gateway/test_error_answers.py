"""Every error the request path answers has its documented status and type (docs/errors.md#the-table)."""

from __future__ import annotations

import pytest

from routing.gateway import request
from tests.core.error_table import rows
from tests.gateway.conftest import API_KEY

TABLE = rows()
MESSAGES = [{"role": "user", "content": "hello"}]

CASES = [
    ("unknown-path", "GET", "/v1/nothing", None, {}, "not_found"),
    ("get-chat", "GET", "/v1/chat/completions", None, {}, "method_not_allowed"),
    ("post-models", "POST", "/v1/models", {}, {}, "method_not_allowed"),
    (
        "no-key",
        "POST",
        "/v1/chat/completions",
        {"model": "fast", "messages": MESSAGES},
        {"Authorization": ""},
        "invalid_api_key",
    ),
    ("unknown-model", "POST", "/v1/chat/completions", {"model": "nope", "messages": MESSAGES}, {}, "model_not_found"),
    (
        "denied-model",
        "POST",
        "/v1/chat/completions",
        {"model": "vendor/secret", "messages": MESSAGES},
        {},
        "model_denied",
    ),
    ("no-model", "POST", "/v1/chat/completions", {"messages": MESSAGES}, {}, "model_required"),
    ("wrong-field", "POST", "/v1/chat/completions", {"model": "fast", "messages": "hi"}, {}, "invalid_request"),
    (
        "responses-stream",
        "POST",
        "/v1/responses",
        {"model": "embed-a", "input": "hi", "stream": True},  # neither responses nor chat
        {},
        "unsupported_capability",
    ),
    (
        "idempotent-stream",
        "POST",
        "/v1/chat/completions",
        {"model": "fast", "messages": MESSAGES, "stream": True},
        {"Idempotency-Key": "k1"},
        "idempotency_stream_conflict",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_error_answers_have_the_documented_status_and_type(gateway, method, path, body, headers, code):
    response = await gateway.request(method, path, json=body, headers=headers)
    row = TABLE[code]
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["type"]) == (row.status, code, row.type)
    assert error["message"]
    assert response.headers["content-type"].startswith("application/json")


async def test_an_unexpected_failure_is_a_500_internal_error_quoting_the_request_id(gateway, monkeypatch):
    def broken(raw: bytes) -> dict:
        raise RuntimeError("a bug")

    monkeypatch.setattr(request, "parse_body", broken)
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {API_KEY}", "X-Request-Id": "req-42"},
    )
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["type"]) == (500, "internal_error", TABLE["internal_error"].type)
    assert "req-42" in error["message"]
    assert "a bug" not in error["message"]  # internals stay in the log
