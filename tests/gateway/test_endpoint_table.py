"""The endpoint table (routing.core.endpoints) is the API: every row is served and described, nothing is
served or described outside it, and a row's reader, handler, schema and estimator exist.

A route added anywhere but the table (a path test in the handler, an operation written into the OpenAPI
document by hand) or a row nobody serves fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from urllib3.filepost import encode_multipart_formdata

from routing.core import endpoints
from routing.core.endpoints import ENDPOINTS, Endpoint
from routing.core.kinds import ENDPOINT_KINDS
from routing.gateway import app, body_schemas, openapi
from routing.plan import cache_key, preflight
from routing.runtime.observe import tracing
from routing.upstream.dialects.openai import PATHS

ROOT = Path(__file__).resolve().parent.parent.parent
# What the gateway answers beside the table: liveness and this document, no key needed (app.serve).
OWN_PATHS = {"/health", "/health/providers", openapi.PATH}


def concrete(row: Endpoint) -> str:
    return row.path if row.prefix is None else row.prefix + "chat-a"


def test_every_row_and_nothing_else_is_in_the_openapi_document() -> None:
    paths = openapi.document()["paths"]
    assert set(paths) == {row.path for row in ENDPOINTS} | OWN_PATHS
    for row in ENDPOINTS:
        operation = paths[row.path][row.method.lower()]
        assert operation["operationId"] == row.operation_id
        assert ("text/event-stream" in operation["responses"]["200"]["content"]) == row.streams
        assert operation.get("x-switchboard-priced-by", "") == row.priced_by
        body = operation.get("requestBody")
        assert (body is not None) == (row.reader is not None), row.path
        if body is not None:
            ref = next(iter(body["content"].values()))["schema"]["$ref"]
            assert ref.rsplit("/", 1)[1] in openapi.document()["components"]["schemas"]


def test_no_api_path_is_written_outside_the_table() -> None:
    """Every "/v1..." string of the request path's modules is a row's path (or this document's)."""
    allowed = {row.path for row in ENDPOINTS} | {row.prefix for row in ENDPOINTS if row.prefix} | OWN_PATHS
    found = []
    for path in sorted((ROOT / "routing" / "gateway").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/v1"):
                if node.value not in allowed and " " not in node.value and node.value != "/v1/":
                    found.append(f"{path.name}: {node.value!r}")
    assert found == [], "API paths outside routing/core/endpoints.py:\n" + "\n".join(found)


def test_every_row_names_what_exists() -> None:
    assert len({(row.method, row.path) for row in ENDPOINTS}) == len(ENDPOINTS)
    assert len({row.operation_id for row in ENDPOINTS}) == len(ENDPOINTS)
    for row in ENDPOINTS:
        assert row.reader in (None, endpoints.JSON, endpoints.MULTIPART), row.path
        assert row.handler is None or row.handler in app._HANDLERS, row.path
        assert row.reader is not None or row.handler is not None, f"{row.path}: no body and no handler"
        if row.reader is not None:
            assert row.serves in body_schemas.BODY_SCHEMAS, f"{row.path}: no body shape for {row.serves!r}"
            assert row.schema == "OpenObject" or row.schema in body_schemas.COMPONENTS, row.path
        if row.serves is not None:
            assert row.serves in ENDPOINT_KINDS and row.estimator in preflight.ESTIMATORS, row.path
        assert row.genai_operation, row.path


def test_the_readers_of_the_table_agree_with_it() -> None:
    assert ENDPOINT_KINDS == ("chat", "embeddings", "rerank", "responses", "completions")
    assert cache_key.CACHEABLE_ENDPOINTS == {"chat", "embeddings", "rerank"}
    assert PATHS == {kind: endpoints.OF_KIND[kind].upstream_path for kind in ENDPOINT_KINDS}
    assert tracing.GENAI_OPERATION["messages"] == "chat"
    assert tracing.GENAI_OPERATION["completions"] == "text_completion"


@pytest.mark.parametrize("row", ENDPOINTS, ids=[f"{r.method} {r.path}" for r in ENDPOINTS])
async def test_every_row_is_served(row: Endpoint, gateway: httpx.AsyncClient) -> None:
    """The row's method reaches its endpoint (an answer or a refusal of the body, never a 404 for the
    path); any other method is a 405 naming the row's."""
    answer = await gateway.request(row.method, concrete(row), json={} if row.reader else None)
    error = answer.json().get("error") if answer.status_code != 200 else None
    assert answer.status_code != 405
    assert not (answer.status_code == 404 and "No endpoint" in str(error)), answer.text
    other = "GET" if row.method == "POST" else "POST"
    answer = await gateway.request(other, concrete(row), json={})
    assert answer.status_code == 405
    assert f"Use {row.method} for" in answer.text


async def test_a_path_outside_the_table_is_a_404_naming_every_endpoint(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/chat/completion", json={})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    for row in ENDPOINTS:
        if row.prefix is None:
            assert row.path in answer.json()["error"]["message"]


def test_route_finds_every_row_and_a_named_segment_needs_a_value() -> None:
    """route() alone (the gateway looks in BY_PATH first, so it never asks route() for a fixed path)."""
    for row in ENDPOINTS:
        if row.prefix is None:
            assert endpoints.route(row.path) is row
    assert endpoints.route("/v1/models/gpt-4o").operation_id == "retrieveModel"
    assert endpoints.route("/v1/models/org/name").operation_id == "retrieveModel"
    assert endpoints.route("/v1/models/") is None
    assert endpoints.route("/v1/chat/completion") is None


async def test_a_model_path_without_an_id_is_the_404_for_an_unknown_path(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.get("/v1/models/")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", answer.text
    assert "No endpoint" in answer.json()["error"]["message"]


def test_the_404s_list_of_endpoints_groups_them_by_method_in_table_order() -> None:
    # computed once at import (routing.core.errors.ENDPOINTS), so read here from the function itself
    assert endpoints.listing() == (
        "POST /v1/chat/completions, /v1/embeddings, /v1/rerank, /v1/responses, /v1/completions, "
        "/v1/messages, /v1/messages/count_tokens and GET /v1/models"
    )


FORM_ROW = Endpoint(
    "/v1/test-form-embeddings",
    "POST",
    "embeddings",
    "embeddings",
    "testForm",
    "A multipart endpoint for this test.",
    serves="embeddings",
    reader=endpoints.MULTIPART,
    output=False,
    input_field="input",
    estimator="longest",
    genai_operation="embeddings",
)


@pytest.fixture
def form_row(monkeypatch: pytest.MonkeyPatch) -> Endpoint:
    monkeypatch.setitem(endpoints.BY_PATH, FORM_ROW.path, FORM_ROW)
    return FORM_ROW


async def test_a_multipart_row_reads_its_body_as_a_form(form_row: Endpoint, gateway: httpx.AsyncClient) -> None:
    body, content_type = encode_multipart_formdata([("model", "embed-a"), ("input", "hello")])
    answer = await gateway.post(form_row.path, content=body, headers={"content-type": content_type})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"][0]["object"] == "embedding"
    # the form is checked against the shape of the kind it serves: `input` must not be empty
    body, content_type = encode_multipart_formdata([("model", "embed-a"), ("input", "")])
    answer = await gateway.post(form_row.path, content=body, headers={"content-type": content_type})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "input"


async def test_a_multipart_rows_refusals_come_from_the_catalogue(
    form_row: Endpoint, gateway: httpx.AsyncClient
) -> None:
    answer = await gateway.post(form_row.path, json={"model": "embed-a", "input": "x"})
    assert answer.status_code == 400 and "multipart/form-data" in answer.json()["error"]["message"]
    fields = [(f"f{i}", "v") for i in range(65)]
    body, content_type = encode_multipart_formdata([("model", "embed-a"), *fields])
    answer = await gateway.post(form_row.path, content=body, headers={"content-type": content_type})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"
