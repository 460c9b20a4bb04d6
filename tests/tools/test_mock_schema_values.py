"""The mock's structured answers: a value of the schema it was given, the same for the same request and
varied across requests (tools.mock.schema_values), in a forced Anthropic or Bedrock tool call, a Bedrock
`outputConfig` and a Gemini JSON answer; a Gemini `responseSchema` field Gemini has no place for is refused."""

from __future__ import annotations

import aiohttp
import jsonschema
import orjson
import pytest
from pydantic import BaseModel

from tools.mock.schema_values import answer_for, value_for


class Step(BaseModel):
    title: str
    minutes: int


class Plan(BaseModel):
    name: str
    kind: str | None
    steps: list[Step]
    rank: int = 3


PLAN = Plan.model_json_schema()
CONSTRAINED = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "minLength": 6, "maxLength": 8},
        "when": {"type": "string", "format": "date-time"},
        "count": {"type": "integer", "minimum": 10, "exclusiveMaximum": 13},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "even": {"type": "integer", "multipleOf": 2, "minimum": 1, "maximum": 9},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2, "maxItems": 3},
        "fixed": {"const": 7},
        "either": {"type": ["boolean", "null"]},
        "both": {"allOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]}, {"required": ["y"]}]},
    },
    "required": ["code", "when", "count", "ratio", "even", "tags", "fixed", "either", "both"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("schema", [PLAN, CONSTRAINED], ids=["pydantic", "constraints"])
def test_every_seed_gives_a_valid_value_the_same_each_time(schema):
    values = [value_for(schema, seed) for seed in range(200)]
    for value in values:
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
    assert values == [value_for(schema, seed) for seed in range(200)]  # deterministic
    assert len({orjson.dumps(v) for v in values}) > 20  # and varied by the seed


def test_geminis_upper_case_types_and_nullable_are_understood():
    schema = {"type": "OBJECT", "properties": {"n": {"type": "INTEGER", "nullable": True}}, "required": ["n"]}
    values = [value_for(schema, seed)["n"] for seed in range(50)]
    assert None in values and any(isinstance(v, int) for v in values)


def test_a_schema_of_one_string_answers_the_mocks_usual_query():
    query = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    assert answer_for(query, {"any": "body"}) == {"query": "mock"}


async def test_a_forced_anthropic_tool_answers_its_schema_and_a_chosen_one_the_mocks_query(mock):
    tool = {"name": "plan", "input_schema": PLAN}
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "go"}], "tools": [tool]}
    async with aiohttp.ClientSession() as http:
        forced = await http.post(mock.root + "/anthropic/v1/messages", json={**body, "tool_choice": {"type": "any"}})
        chosen = await http.post(mock.root + "/anthropic/v1/messages", json=body)
        forced_body, chosen_body = await forced.json(), await chosen.json()
    (call,) = forced_body["content"]  # no text before a forced call
    Plan.model_validate(call["input"])
    assert chosen_body["content"][1]["input"] == {"query": "mock"}


async def test_gemini_answers_json_of_its_schema_and_refuses_a_field_its_schema_lacks(mock):
    url = mock.root + "/gemini/v1beta/models/g:generateContent"
    contents = [{"role": "user", "parts": [{"text": "go"}]}]
    plain = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with aiohttp.ClientSession(headers={"x-goog-api-key": "k"}) as http:
        ok = await http.post(url, json={"contents": contents, "generationConfig": json_config("responseSchema", plain)})
        full = await http.post(
            url, json={"contents": contents, "generationConfig": json_config("responseJsonSchema", PLAN)}
        )
        refused = await http.post(
            url, json={"contents": contents, "generationConfig": json_config("responseSchema", PLAN)}
        )
        answers = [await ok.json(), await full.json(), await refused.json()]
    assert isinstance(orjson.loads(answers[0]["candidates"][0]["content"]["parts"][0]["text"])["n"], int)
    Plan.model_validate_json(answers[1]["candidates"][0]["content"]["parts"][0]["text"])
    assert refused.status == 400 and "Unknown name '$defs'" in answers[2]["error"]["message"]


def json_config(field: str, schema: dict) -> dict:
    return {"responseMimeType": "application/json", field: schema}
