"""The model named as asked and a passthrough body's model spliced in place (docs/api.md#model-in-answers),
pinned where the broader tests leave it loose: a member right after a line end in a stream, strings that
end in a backslash or hold escaped quotes and brackets before the top-level `model`, and the bound on the
`"model":` keys read before giving up. Pure functions on bytes; each test kills mutants the broader
tests let live (docs/testing.md "Mutation testing")."""

from __future__ import annotations

import json

from routing.gateway.model_name import Renamer, with_model


def test_a_member_that_starts_right_after_a_line_end_is_renamed_when_cut_there():
    rename = Renamer("up", "asked")
    out = rename.feed(b'{\n"model": "up"}') + rename.feed(b"\n") + rename.flush()
    assert out == b'{\n"model": "asked"}\n'


def test_a_string_ending_in_a_backslash_before_the_model_does_not_hide_it():
    raw = b'{"path": "C:\\\\", "note": "[", "model": "mine"}'
    assert json.loads(raw)["path"] == "C:\\"
    assert with_model(raw, "up") == b'{"path": "C:\\\\", "note": "[", "model": "up"}'


def test_escaped_quotes_around_a_bracket_before_the_model_do_not_hide_it():
    raw = b'{"say": "a \\"[\\" b", "model": "mine"}'
    assert json.loads(raw)["say"] == 'a "[" b'
    assert with_model(raw, "up") == b'{"say": "a \\"[\\" b", "model": "up"}'


def test_more_nested_model_keys_than_the_bound_leave_the_body_to_be_encoded_again():
    tools = [{"name": f"t{i}", "input": {"model": "x"}} for i in range(8)]
    raw = json.dumps({"tools": tools, "model": "mine"}).encode()
    assert with_model(raw, "up") is None
    fewer = json.dumps({"tools": tools[:7], "model": "mine"}).encode()
    assert with_model(fewer, "up") == fewer.replace(b'"model": "mine"', b'"model": "up"')
