"""GET /v1/models/{id} through the official openai SDK (`client.models.retrieve`): one model or
alias the key may use, in OpenAI's shape; 404 model_not_found for anything else, whether it does
not exist or this key's org or key list keeps it out (the answer does not tell them apart)."""

from __future__ import annotations

import dataclasses

import httpx
import openai
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application

RECORDED = 1_767_225_600  # when the served configuration version was recorded


@pytest.fixture
async def client(upstream):
    previous = live.current()

    def serve(**controls) -> None:
        rows = [{**row, **controls} for row in key_rows()]
        live.swap(dataclasses.replace(build_snapshot(document(upstream), rows, {}, version=1), config_time=RECORDED))

    serve()
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway_application))
    sdk = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=API_KEY, http_client=http, max_retries=0)
    sdk.serve = serve
    yield sdk
    await http.aclose()
    live.swap(previous)


async def test_a_model_and_an_alias_come_back_in_openais_shape(client):
    model = await client.models.retrieve("chat-b")
    assert (model.id, model.object, model.created, model.owned_by) == ("chat-b", "model", RECORDED, "mock")
    alias = await client.models.retrieve("fast")
    assert (alias.id, alias.object, alias.created, alias.owned_by) == ("fast", "model", RECORDED, "mock")
    assert alias.model_extra["alias_of"] == "chat-a"


async def test_the_list_and_one_model_agree(client):
    listed = {m.id: m for m in (await client.models.list()).data}
    assert listed["chat-b"] == await client.models.retrieve("chat-b")
    assert all(m.created == RECORDED for m in listed.values())


async def test_a_model_the_key_may_not_use_is_as_unknown_as_one_that_does_not_exist(client):
    answers = {}
    for name in ("vendor/secret", "no-such-model"):  # denied by the org's policy; absent
        with pytest.raises(openai.NotFoundError) as raised:
            await client.models.retrieve(name)
        error = raised.value.body
        assert error["code"] == "model_not_found" and name in error["message"]
        answers[name] = error["message"].replace(name, "NAME")
    assert answers["vendor/secret"] == answers["no-such-model"]

    client.serve(models=["chat-b"])  # the key narrows its org
    assert (await client.models.retrieve("chat-b")).id == "chat-b"
    for name in ("chat-a", "fast"):
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve(name)


async def test_only_get_answers(client):
    with pytest.raises(openai.APIStatusError) as raised:
        await client.post("/models/chat-b", cast_to=httpx.Response, body={})
    assert raised.value.status_code == 405 and raised.value.body["code"] == "method_not_allowed"
