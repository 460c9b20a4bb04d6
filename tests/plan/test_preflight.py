"""Preflight: capability and context checks before any upstream call (docs/resilience.md#r1)."""

from __future__ import annotations

import pytest

from routing.plan import preflight
from routing.plan.chain import build_chain
from tests.factories import model, snapshot

IMAGE = {
    "role": "user",
    "content": [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def _model(caps=("chat",), **extra):
    snap = snapshot(models=[model("x", caps=caps, **extra)])
    return snap.models["x"]


@pytest.mark.parametrize(
    ("kind", "body", "needs"),
    [
        ("chat", {"messages": []}, ("chat",)),
        ("chat", {"stream": True}, ("chat", "streaming")),
        ("chat", {"stream": "yes"}, ("chat",)),
        ("chat", {"tools": TOOLS}, ("chat", "tools")),
        ("chat", {"tools": []}, ("chat",)),
        ("chat", {"functions": [{"name": "f"}]}, ("chat", "tools")),
        ("chat", {"response_format": {"type": "json_schema", "json_schema": {}}}, ("chat", "structured_output")),
        ("chat", {"response_format": {"type": "json_object"}}, ("chat", "structured_output")),
        ("chat", {"response_format": {"type": "text"}}, ("chat",)),
        ("chat", {"messages": [IMAGE]}, ("chat", "vision")),
        ("chat", {"messages": [{"role": "user", "content": "hi"}]}, ("chat",)),
        (
            "responses",
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            ("responses", "vision"),
        ),
        ("responses", {"text": {"format": {"type": "json_schema"}}}, ("responses", "structured_output")),
        ("embeddings", {"input": "hello", "stream": True}, ("embeddings",)),
        ("rerank", {"query": "q", "documents": ["a"]}, ("rerank",)),
        (
            "chat",
            {"stream": True, "tools": TOOLS, "response_format": {"type": "json_object"}, "messages": [IMAGE]},
            ("chat", "streaming", "tools", "structured_output", "vision"),
        ),
    ],
)
def test_requirements_read_from_the_body(kind: str, body: dict, needs: tuple[str, ...]) -> None:
    assert preflight.requirements(kind, body).needs == needs


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
def test_requested_output_tokens_come_from_any_of_the_fields(field: str) -> None:
    req = preflight.requirements("chat", {field: 300})
    assert (req.max_output_tokens, req.max_output_param) == (300, field)


def test_the_largest_output_field_decides_when_several_are_given() -> None:
    """Dialects send either field (anthropic prefers max_completion_tokens): the check must cover both."""
    req = preflight.requirements("chat", {"max_tokens": 50, "max_completion_tokens": 5000})
    assert (req.max_output_tokens, req.max_output_param) == (5000, "max_completion_tokens")
    assert preflight.check_link(_model(max_output_tokens=4096), req) == "unsupported_capability"


# The estimate's rule (characters / 4 plus a per-message allowance, see routing/plan/preflight.py)
# may be tuned; these tests hold what a caller relies on instead: that it is in the range real
# tokenizers give, that every piece of text counts, and how each endpoint's inputs combine.
PROSE = (
    "The gateway forwards each request to the first model of its chain that can serve it, "
    "retrying transient failures with backoff and skipping providers whose breaker is open. "
) * 12  # ~2 000 characters of ordinary English


def _chat_tokens(*messages: dict) -> int:
    return preflight.requirements("chat", {"messages": list(messages)}).estimated_tokens


def test_english_prose_is_estimated_in_the_range_real_tokenizers_give() -> None:
    # BPE tokenizers of current chat models spend 3.5 to 5 characters per English token
    tokens = _chat_tokens({"role": "user", "content": PROSE})
    assert len(PROSE) / 6 <= tokens <= len(PROSE) / 3


def test_every_piece_of_text_in_a_chat_counts_and_images_do_not() -> None:
    base = _chat_tokens({"role": "user", "content": "hi"})
    more = 400  # characters added in each place; each must add a real share of tokens
    grown = [
        _chat_tokens({"role": "system", "content": "x" * more}, {"role": "user", "content": "hi"}),
        _chat_tokens(
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "x" * more}]}
        ),
        _chat_tokens(
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "f", "arguments": "x" * more}}],
            },
        ),
    ]
    assert all(g - base >= more / 6 for g in grown), (base, grown)
    with_image = _chat_tokens({"role": "user", "content": [{"type": "text", "text": "hi"}, IMAGE["content"][1]]})
    assert with_image == base


def test_each_message_costs_something_even_when_empty() -> None:
    one = _chat_tokens({"role": "user", "content": ""})
    assert one > 0
    assert _chat_tokens({"role": "user", "content": ""}, {"role": "assistant", "content": ""}) > one


def test_responses_count_instructions_and_input() -> None:
    alone = preflight.requirements("responses", {"input": "hi"}).estimated_tokens
    with_instructions = preflight.requirements("responses", {"instructions": PROSE, "input": "hi"}).estimated_tokens
    as_items = preflight.requirements(
        "responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": PROSE}]}]}
    ).estimated_tokens
    assert with_instructions - alone >= len(PROSE) / 6
    assert as_items >= len(PROSE) / 6


def test_text_split_into_parts_or_tool_calls_counts_the_same_as_one_piece() -> None:
    a, b = "x" * 13, "y" * 29  # lengths that do not divide evenly, so nothing is lost to rounding
    whole = _chat_tokens({"role": "user", "content": a + b})
    assert _chat_tokens({"role": "user", "content": [a, b]}) == whole
    assert (
        _chat_tokens({"role": "user", "content": [{"type": "text", "text": a}, {"type": "text", "text": b}]}) == whole
    )
    calls = [{"function": {"name": "f", "arguments": a}}, {"function": {"name": "g", "arguments": b}}]
    assert _chat_tokens({"role": "assistant", "content": None, "tool_calls": calls}) == whole
    assert _chat_tokens({"role": "assistant", "content": a, "tool_calls": calls[1:]}) == whole


def test_malformed_parts_are_ignored_rather_than_crashing_the_estimate() -> None:
    base = _chat_tokens({"role": "user", "content": "hi"})
    odd = {
        "role": "user",
        "content": ["hi", 42, None, {"type": "text", "text": 7}],
        "tool_calls": ["not a call", {"function": "not a function"}, {"function": {"arguments": 3}}],
    }
    assert _chat_tokens(odd) == base
    assert _chat_tokens("hi") == base  # a bare string message is counted as its text
    assert preflight.requirements("embeddings", {"input": None}).estimated_tokens == 0
    query_only = preflight.requirements("rerank", {"query": "q" * 40, "documents": []}).estimated_tokens
    assert query_only == preflight.requirements("rerank", {"query": "q" * 40, "documents": "x"}).estimated_tokens
    assert query_only > 0


def test_embeddings_estimate_is_the_longest_single_input() -> None:
    def tokens(data):
        return preflight.requirements("embeddings", {"input": data}).estimated_tokens

    assert tokens(["short", PROSE, "also short"]) == tokens([PROSE]) == tokens(PROSE)
    assert len(PROSE) / 6 <= tokens(PROSE) <= len(PROSE) / 3
    assert tokens([1, 2, 3, 4, 5]) == 5  # token ids are counted, not estimated


def test_rerank_estimate_is_query_plus_longest_document() -> None:
    def tokens(query, documents):
        return preflight.requirements("rerank", {"query": query, "documents": documents}).estimated_tokens

    assert tokens("q" * 40, ["short", {"text": PROSE}]) == tokens("q" * 40, [PROSE])
    assert tokens("q" * 400, [PROSE]) - tokens("", [PROSE]) >= 400 / 6


def test_estimate_is_not_computed_when_no_link_declares_a_context_window() -> None:
    class Exploding(dict):
        def get(self, key, default=None):
            if key in ("messages", "input"):
                raise AssertionError("walked the prompt")
            return super().get(key, default)

    req = preflight.requirements("embeddings", Exploding(input="x"))
    assert preflight.check_link(_model(caps=("embeddings",)), req) is None


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ({"stream": True}, "streaming"),
        ({"tools": TOOLS}, "tools"),
        ({"response_format": {"type": "json_schema"}}, "structured_output"),
        ({"messages": [IMAGE]}, "vision"),
    ],
)
def test_each_missing_capability_skips_the_link(body: dict, missing: str) -> None:
    req = preflight.requirements("chat", body)
    assert preflight.check_link(_model(caps=("chat",)), req) == "unsupported_capability"
    assert preflight.check_link(_model(caps=("chat", missing)), req) is None


def test_endpoint_kind_must_be_declared() -> None:
    req = preflight.requirements("embeddings", {"input": "x"})
    assert preflight.check_link(_model(caps=("chat",)), req) == "unsupported_capability"
    assert preflight.check_link(_model(caps=("embeddings",)), req) is None


def test_unknown_kind_is_unsupported() -> None:
    req = preflight.requirements("audio", {})
    assert preflight.check_link(_model(caps=("chat", "streaming")), req) == "unsupported_capability"
    err = preflight.no_link_error(
        [preflight.dataclasses.replace(_link(caps=("chat",)), skip_reason="unsupported_capability")], req
    )
    assert err.code == "unsupported_capability" and "not a known capability" in err.message


def test_context_window_exceeded_skips_with_context_length() -> None:
    req = preflight.requirements("chat", {"messages": [{"role": "user", "content": PROSE}]})
    estimate = req.estimated_tokens
    assert preflight.check_link(_model(context_window=estimate - 1), req) == "context_length"
    assert preflight.check_link(_model(context_window=estimate), req) is None
    assert preflight.check_link(_model(), req) is None  # no window declared: assumed to fit


def test_requested_output_above_model_maximum_is_unsupported() -> None:
    req = preflight.requirements("chat", {"max_tokens": 5000})
    assert preflight.check_link(_model(max_output_tokens=4096), req) == "unsupported_capability"
    assert preflight.check_link(_model(max_output_tokens=5000), req) is None
    assert preflight.check_link(_model(), req) is None


def _link(caps=("chat",), **extra):
    snap = snapshot(models=[model("x", caps=caps, **extra)])
    return build_chain(snap, snap.orgs["acme"], snap.models["x"], "x")[0]


def _chain_snapshot():
    return snapshot(
        models=[
            model("a", caps=("chat",), context_window=1000, fallbacks=["b", "c"]),
            model("b", caps=("chat", "tools"), context_window=100),
            model("c", caps=("chat", "tools"), context_window=100_000),
        ]
    )


def test_apply_marks_only_the_links_that_cannot_serve() -> None:
    snap = _chain_snapshot()
    chain = build_chain(snap, snap.orgs["acme"], snap.models["a"], "a")
    req = preflight.requirements("chat", {"tools": TOOLS, "messages": [{"role": "user", "content": "x" * 2000}]})
    marked = preflight.apply(chain, req)
    assert [(link.model.id, link.skip_reason) for link in marked] == [
        ("a", "unsupported_capability"),
        ("b", "context_length"),
        ("c", None),
    ]
    assert all(link.skip_reason is None for link in chain)  # the cached chain is untouched
    assert preflight.servable(marked)


def test_apply_returns_the_same_chain_when_every_link_can_serve() -> None:
    snap = _chain_snapshot()
    chain = build_chain(snap, snap.orgs["acme"], snap.models["a"], "a")
    assert preflight.apply(chain, preflight.requirements("chat", {"messages": []})) is chain


def test_apply_keeps_policy_skips() -> None:
    snap = snapshot(
        models=[model("a", fallbacks=["b"]), model("b", caps=("chat",))],
        policies=[{"pattern": "b", "action": "deny", "priority": 1}],
    )
    chain = build_chain(snap, snap.orgs["acme"], snap.models["a"], "a")
    marked = preflight.apply(chain, preflight.requirements("chat", {"tools": TOOLS}))
    assert [link.skip_reason for link in marked] == [None, "model_denied"]


def test_no_link_error_names_the_missing_capability() -> None:
    snap = snapshot(models=[model("chat-a", caps=("chat",), fallbacks=["chat-b"]), model("chat-b", caps=("chat",))])
    chain = build_chain(snap, snap.orgs["acme"], snap.models["chat-a"], "chat-a")
    req = preflight.requirements("chat", {"tools": TOOLS})
    marked = preflight.apply(chain, req)
    assert not preflight.servable(marked)
    err = preflight.no_link_error(marked, req)
    assert (err.status, err.code, err.param) == (400, "unsupported_capability", "tools")
    assert err.message == "model chat-a does not support 'tools'; pick a model whose capabilities include tools."


def test_no_link_error_for_context_gives_estimate_and_window() -> None:
    snap = snapshot(
        models=[
            model("a", caps=("chat",), context_window=10, fallbacks=["b"]),
            model("b", caps=("chat",), context_window=20),
        ]
    )
    chain = build_chain(snap, snap.orgs["acme"], snap.models["a"], "a")
    req = preflight.requirements("chat", {"messages": [{"role": "user", "content": "y" * 400}]})
    err = preflight.no_link_error(preflight.apply(chain, req), req)
    assert (err.status, err.code) == (400, "context_length_exceeded")
    assert "104 tokens" in err.message and "10-token context window" in err.message


def test_no_link_error_for_output_limit_names_the_field() -> None:
    req = preflight.requirements("chat", {"max_completion_tokens": 9000})
    link = _link(max_output_tokens=100)
    err = preflight.no_link_error(preflight.apply([link], req), req)
    assert (err.code, err.param) == ("unsupported_capability", "max_completion_tokens")
    assert "9000" in err.message and "100" in err.message


def test_no_link_error_for_the_endpoint_kind() -> None:
    req = preflight.requirements("rerank", {"query": "q", "documents": ["d"]})
    err = preflight.no_link_error(preflight.apply([_link(caps=("chat",))], req), req)
    assert err.code == "unsupported_capability" and "'rerank'" in err.message
