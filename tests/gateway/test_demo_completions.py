"""The demo configuration serves every endpoint the README lists, legacy text completions
included: its `text-a` model, through the official openai SDK, against the demo's mock upstream."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import openai
import yaml

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.config.validation import validate_document
from tests.gateway.conftest import API_KEY
from tests.inprocess import gateway_application

DEMO = Path(__file__).resolve().parents[2] / "routing" / "fixtures" / "demo.yaml"
DEMO_MOCK = "http://127.0.0.1:9001"  # where demo.yaml points; `make demo` starts the mock there


def demo_document(mock: str) -> dict:
    return yaml.safe_load(DEMO.read_text().replace(DEMO_MOCK, mock))


async def test_the_demo_has_a_completions_model_that_answers_through_the_sdk(upstream):
    document = demo_document(upstream)
    assert not validate_document(document)
    assert any("completions" in m["capabilities"] for m in document["models"])
    rows = [
        {
            "key_hash": hashlib.sha256(API_KEY.encode()).hexdigest(),
            "prefix": API_KEY[:10],
            "org": "demo",
            "agent": "demo-agent",
            "expires_at": None,
        }
    ]
    previous = live.current()
    live.swap(build_snapshot(document, rows, {}, version=1))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application)) as http:
            client = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, http_client=http, max_retries=0)
            model = next(m.id for m in (await client.models.list()).data if m.id == "text-a")
            answer = await client.completions.create(model=model, prompt="Say hello", max_tokens=8)
            assert answer.object == "text_completion" and answer.choices[0].text
            chunks = [c async for c in await client.completions.create(model=model, prompt="Hi", stream=True)]
            assert "".join(c.choices[0].text for c in chunks if c.choices)
    finally:
        live.swap(previous)
