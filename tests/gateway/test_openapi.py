"""GET /v1/openapi.json: a valid OpenAPI 3.1 document of the gateway's own API (docs/api.md#openapi)."""

from __future__ import annotations

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from routing.core.errors import CATALOGUE
from tests.inprocess import gateway_application

ENDPOINTS = {
    "/v1/chat/completions": "post",
    "/v1/completions": "post",
    "/v1/embeddings": "post",
    "/v1/rerank": "post",
    "/v1/responses": "post",
    "/v1/messages": "post",
    "/v1/models": "get",
    "/v1/models/{model}": "get",
    "/health": "get",
    "/health/providers": "get",
}
HEADERS = [
    "X-Request-Id",
    "X-Switchboard-Model-Used",
    "X-Switchboard-Provider-Used",
    "X-Switchboard-Upstream-Model",
    "X-Switchboard-Dropped",
    "X-Switchboard-Attempts",
    "X-Switchboard-Cache",
    "X-Switchboard-Fallback",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "Retry-After",
]


@pytest.fixture
async def spec(gateway: httpx.AsyncClient) -> dict:
    """The document as a client without a key gets it."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application), base_url="http://gw") as c:
        answer = await c.get("/v1/openapi.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    return answer.json()


async def test_the_document_is_valid_openapi_3_1(spec: dict) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises with the path of the first problem


async def test_every_endpoint_and_header_of_the_api_is_described(spec: dict) -> None:
    for path, method in ENDPOINTS.items():
        assert method in spec["paths"].get(path, {}), f"{method.upper()} {path} missing"
    assert sorted(spec["components"]["headers"]) == sorted(HEADERS)
    chat = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "text/event-stream" in chat["200"]["content"]
    assert set(chat["429"]["headers"]) >= {"Retry-After", "x-ratelimit-remaining-requests"}


async def test_every_error_code_of_the_catalogue_is_in_the_document_with_its_meaning(spec: dict) -> None:
    code_schema = spec["components"]["schemas"]["ErrorCode"]
    assert set(code_schema["enum"]) == set(CATALOGUE)
    for code, (status, _) in CATALOGUE.items():
        assert f"`{code}` ({status}," in code_schema["description"]
        line = next(x for x in code_schema["description"].splitlines() if x.startswith(f"- `{code}`"))
        assert len(line.split(": ", 1)[1]) > 10, f"{code} has no meaning in routing/gateway/openapi.py"
        statuses = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
        assert f"`{code}`" in statuses[str(status)]["description"]


async def test_a_real_error_answer_matches_the_documented_error_shape(spec: dict, gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/chat/completions", content=b"{not json")
    assert answer.status_code == 400
    schema = {**spec["components"]["schemas"]["Error"], "components": spec["components"]}
    schema["properties"]["error"]["properties"]["code"] = {"$ref": "#/components/schemas/ErrorCode"}
    jsonschema.validate(answer.json(), schema)
    assert answer.json()["error"]["code"] in spec["components"]["schemas"]["ErrorCode"]["enum"]


async def test_completions_and_one_model_are_described_with_their_body_and_parameter(spec: dict) -> None:
    completions = spec["paths"]["/v1/completions"]["post"]
    assert completions["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/CompletionRequest")
    assert "text/event-stream" in completions["responses"]["200"]["content"]
    assert spec["components"]["schemas"]["CompletionRequest"]["required"] == ["prompt"]
    one = spec["paths"]["/v1/models/{model}"]["get"]
    assert {"name": "model", "in": "path"}.items() <= next(p for p in one["parameters"] if "name" in p).items()
    assert "`model_not_found`" in one["responses"]["404"]["description"]
