"""Walk one cell: send the feature's request through the in-process gateway and name what happened."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.conformance.walk import (
    LINKS,
    PATHS,
    THOUGHT,
    cached_back,
    dropped,
    reached,
    refused_param,
    request,
    script_cache_reads,
    script_thoughts,
)
from tests.gateway.conftest import API_KEY
from tests.inprocess import gateway_application

SILENT = "silently dropped"


async def observe(state: Any, client: str, link: str, feature: str) -> str:
    """The cell's observed outcome, in the matrix's vocabulary (or SILENT, or `error:<status>`)."""
    model, upstream, protocol = LINKS[link]
    body = request(client, model, feature)
    if body is None:
        return "n/a"
    seen = state.model(upstream).requests
    before = len(seen)
    if feature == "reasoning content back":
        script_thoughts(state, upstream, protocol)
    elif feature == "usage: cached tokens back":
        script_cache_reads(state, upstream, protocol)
    headers = {"authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    transport = httpx.ASGITransport(app=gateway_application)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        answer = await http.post(PATHS[client], json=body, headers=headers)
    state.model(upstream).steps.clear()  # a script the request never used must not answer the next cell
    if answer.status_code == 400:
        return f"refused:{refused_param(answer.status_code, answer.content)}"
    if answer.status_code != 200:
        return f"error:{answer.status_code}:{answer.text[:120]}"
    if feature == "streaming" and not answer.headers.get("content-type", "").startswith("text/event-stream"):
        return f"error:not a stream: {answer.headers.get('content-type')}"
    named = dropped(answer.headers.get("x-switchboard-dropped"))
    got, path = (orjson.loads(seen[-1][2]), seen[-1][0]) if len(seen) > before else ({}, "")
    if feature in ("reasoning content back", "usage: cached tokens back"):
        back = THOUGHT in answer.text if feature == "reasoning content back" else cached_back(client, answer.json())
        return (
            ("passthrough" if protocol == client else "translated")
            if back
            else ("dropped-hint:" + ", ".join(named) if named else SILENT)
        )
    if reached(feature, got, path):
        same = protocol == client and all(got.get(k) == v for k, v in body.items() if k != "model")
        return "passthrough" if same else "translated"
    if named:
        return "dropped-hint:" + ", ".join(named)
    return SILENT
