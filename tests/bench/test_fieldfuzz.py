"""The field-path fuzzer's case list: exhaustive, both dialect directions, reproducible samples."""

from __future__ import annotations

import json

from bench import fieldfuzz


def test_the_full_run_has_every_endpoint_both_stream_modes_and_both_dialect_directions():
    cases = list(fieldfuzz.cases())
    assert len(cases) >= 18_000
    seen = {(c.endpoint, c.model, c.stream) for c in cases}
    for endpoint in ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"):
        for model in ("f-chat", "f-claude"):  # openai-dialect and anthropic-dialect upstreams
            assert {(endpoint, model, False), (endpoint, model, True)} <= seen
    assert {c.endpoint for c in cases} >= {"/v1/embeddings", "/v1/rerank", "/v1/responses"}
    values = {c.value for c in cases}
    assert len(values) == len(fieldfuzz.HOSTILE) + 1 >= 31  # the hostile values and removal


def test_a_case_sets_one_nested_path_and_leaves_the_rest_valid():
    case = next(
        c
        for c in fieldfuzz.cases()
        if c.endpoint == "/v1/messages" and c.path == ("messages", 0, "content", 1, "type") and c.value == "object"
    )
    body = json.loads(case.body())
    assert body["messages"][0]["content"][1]["type"] == fieldfuzz.HOSTILE["object"]
    assert body["messages"][0]["content"][0] == {"type": "text", "text": "hi"} and body["max_tokens"] == 20
    removed = fieldfuzz.Case(case.body_index, case.endpoint, case.model, True, ("messages", 0, "role"), "<removed>")
    body = json.loads(removed.body())
    assert "role" not in body["messages"][0] and body["stream"] is True


def test_a_sample_is_the_same_for_the_same_seed():
    assert fieldfuzz.sample(50, 3) == fieldfuzz.sample(50, 3) != fieldfuzz.sample(50, 4)
    assert len(fieldfuzz.sample(None, 1)) == len(list(fieldfuzz.cases()))
