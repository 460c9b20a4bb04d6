"""`/v1/responses` answers pass through byte for byte, in-process (docs: the Responses endpoint).

tests/e2e/test_resilience.py checks the same through a real server; this one runs the
request path alone against the mock upstream, in a fraction of a second.
"""

from __future__ import annotations

import copy

import httpx

from routing.config import live
from routing.config.snapshot import build_snapshot
from tests.gateway.conftest import document, key_rows

# A Responses answer as a newer upstream might send it: an output item type and top-level
# fields this gateway has never heard of, unusual key order and spacing, a null at the end.
BODY = (
    '{"id": "resp_1", "object": "response", "created_at": 1700000000, "status": "completed",'
    ' "model": "ip-resp", "future_field": {"b": 2, "a": [1, 2]},'
    ' "output": [{"type": "reasoning_trace", "id": "rt_1", "steps": ["think", "answer"]},'
    ' {"type": "message", "id": "msg_1", "role": "assistant", "sparkle": true,'
    ' "content": [{"type": "output_text", "text": "hi", "annotations": []}]},'
    ' {"type": "hologram", "id": "h_1"}],'
    ' "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},  "zz_last": null}'
)


async def test_a_responses_answer_with_unknown_items_and_fields_comes_back_byte_identical_but_the_model(
    gateway, upstream
):
    doc = copy.deepcopy(document(upstream))
    doc["models"].append({"id": "resp", "provider": "mock", "upstream_model": "ip-resp", "capabilities": ["responses"]})
    live.swap(build_snapshot(doc, key_rows(), {}, version=2))
    async with httpx.AsyncClient(base_url=upstream) as control:
        script = {"model": "ip-resp", "steps": [], "then": {"status": 200, "body": BODY}}
        (await control.post("/_control/script", json=script)).raise_for_status()
        response = await gateway.post("/v1/responses", json={"model": "resp", "input": "hi"})
        assert response.status_code == 200, response.text
        # byte for byte, only the model renamed to the id the client asked for (the upstream's in a header)
        assert response.content == BODY.replace('"model": "ip-resp"', '"model": "resp"').encode()
        assert response.headers["x-switchboard-upstream-model"] == "ip-resp"
        calls = (await control.get("/_control/calls", params={"model": "ip-resp"})).json()
    assert calls["requests"][-1]["body"] == {"model": "ip-resp", "input": "hi"}
