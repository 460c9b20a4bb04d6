"""The model named as asked (docs/api.md#model-in-answers) and a passthrough body's model spliced in place."""

from __future__ import annotations

import json

import orjson

from routing.gateway.model_name import Renamer, renamed, renamer, with_model


def test_only_model_members_with_the_upstream_name_are_renamed():
    raw = b'{"model": "up", "x": "the \\"model\\": \\"up\\"", "tool": {"model":"up2"}}'
    assert (
        Renamer("up", "asked")(raw) == b'{"model": "asked", "x": "the \\"model\\": \\"up\\"", "tool": {"model":"up2"}}'
    )
    assert renamer("same", "same") is None and renamer("", "up") is None


def test_a_whole_answer_is_renamed_in_one_call_as_the_renamer_would():
    raw = b'{"model": "up", "x": "the \\"model\\": \\"up\\"", "tool": {"model":"up2"}, "m": {"model" :"up"}}'
    assert renamed(raw, "asked", "up") == Renamer("up", "asked")(raw)
    assert renamed(raw, "asked", "up").count(b'"asked"') == 2
    assert renamed(raw, "up", "up") is raw and renamed(raw, "", "up") is raw and renamed(raw, "a", "zz") is raw


def test_a_member_cut_across_stream_chunks_is_still_renamed_and_no_byte_is_lost():
    frames = b'data: {"id":1,"model":"gpt-up","x":1}\n\ndata: {"id":2,"model":"gpt-up"}\n\n'
    rename = Renamer("gpt-up", "mine")
    out = b"".join(rename.feed(frames[i : i + 7]) for i in range(0, len(frames), 7)) + rename.flush()
    assert out == frames.replace(b"gpt-up", b"mine")


def test_a_claude_code_body_keeps_every_byte_but_its_top_level_model():
    # the SDK's order puts `model` after `messages`; a tool call's input and a tool's schema name `model` too
    body = {
        "max_tokens": 5,
        "messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": {"model": "sonnet"}}]}],
        "model": "claude-opus-4-8",
        "tools": [{"name": "Agent", "input_schema": {"properties": {"model": {"enum": ["sonnet", "opus"]}}}}],
        "note": "caf\u00e9",
    }
    raw = json.dumps(body).encode()  # spaces and \\u escapes: what orjson would not reproduce
    out = with_model(raw, "up-claude")
    assert out == raw.replace(b'"model": "claude-opus-4-8"', b'"model": "up-claude"')
    assert orjson.loads(out) == {**body, "model": "up-claude"}
