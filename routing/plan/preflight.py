"""Preflight: which links of a chain can serve this request, decided before any upstream call.

A model serves a request only if its capability manifest declares everything the
request needs (docs/resilience.md#r1); a capability it lacks or leaves undeclared makes the
link skip with "unsupported_capability", a prompt estimated above its declared
`context_window` with "context_length". When no link is left, the client gets
400 `unsupported_capability` / `context_length_exceeded` naming what is missing.

Token estimate (no tokenizer download, microseconds per request): characters of
all text content / 4, rounded up, plus 4 tokens per chat message for the role
and framing. Embeddings check the longest single input (each input is embedded
on its own); rerank checks the query plus the longest document. Token-id inputs
count one token per id. The estimate is computed lazily, only when a link of the
chain declares a context window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from routing.config.snapshot import ModelSpec
from routing.core import errors
from routing.core.endpoints import OF_KIND
from routing.core.errors import GatewayError
from routing.core.executor import Link
from routing.core.kinds import DIALECT_KINDS, ENDPOINT_KINDS

KINDS = frozenset(ENDPOINT_KINDS)
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
_IMAGE_PARTS = frozenset({"image_url", "input_image"})
_STRUCTURED = frozenset({"json_schema", "json_object"})
_MAX_OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
# The request field a missing capability comes from, for the error's `param`.
_PARAM = {"streaming": "stream", "tools": "tools", "structured_output": "response_format", "vision": "messages"}
# Each kind's endpoint row (routing.core.endpoints) says where its prompt is (the context-length error's
# `param`), how it is estimated (ESTIMATORS), whether it has output, and how messages name it.
_PROMPT_PARAM = {kind: row.input_field for kind, row in OF_KIND.items()}
_KIND_NAMES = {kind: row.title for kind, row in OF_KIND.items() if row.title}
# Kinds without output (embeddings, rerank): their body asks for no streaming, tools, format or images.
_NO_OUTPUT = frozenset(kind for kind, row in OF_KIND.items() if not row.output)

UNSUPPORTED = "unsupported_capability"
CONTEXT_LENGTH = "context_length"


@dataclass(frozen=True)
class Requirements:
    """What a request needs from a model; built once per request from its body.

    `needs` lists capability names in the order they are checked (endpoint kind first).
    `body` is kept only to compute the token estimate on demand; `known_tokens`
    replaces the estimate (explain_route's --tokens).
    """

    kind: str
    streaming: bool = False
    tools: bool = False
    structured_output: bool = False
    vision: bool = False
    max_output_tokens: int | None = None
    max_output_param: str | None = None
    body: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    known_tokens: int | None = None

    @cached_property
    def needs(self) -> tuple[str, ...]:
        needs = [self.kind]
        if self.streaming:
            needs.append("streaming")
        if self.tools:
            needs.append("tools")
        if self.structured_output:
            needs.append("structured_output")
        if self.vision:
            needs.append("vision")
        return tuple(needs)

    @cached_property
    def estimated_tokens(self) -> int:
        """Estimated prompt tokens (see the module docstring); computed at most once."""
        if self.known_tokens is not None:
            return self.known_tokens
        estimator, input_field = _ESTIMATE.get(self.kind, _AS_CHAT)  # estimate_tokens, one call less
        return estimator(self.body, input_field)


def _ceil_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _text_len(value: Any) -> int:
    """Characters of text in a content value: a string, or a list of parts with text."""
    if isinstance(value, str):
        return len(value)
    total = 0
    if isinstance(value, list):
        for part in value:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    total += len(text)
    return total


def _message_chars(message: Any) -> int:
    if not isinstance(message, dict):
        return _text_len(message)
    chars = _text_len(message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                chars += len(fn["arguments"])
    return chars


def _input_tokens(item: Any) -> int:
    """One embeddings input: a string, or a list of token ids."""
    if isinstance(item, str):
        return _ceil_tokens(len(item))
    if isinstance(item, list):
        return len(item)
    return 0


def _messages(body: Mapping[str, Any], field: str) -> int:
    """Chat: the text of every message, plus TOKENS_PER_MESSAGE for each one's role and framing."""
    messages = body.get(field)
    items = messages if isinstance(messages, list) else ()
    chars = 0
    for message in items:
        chars += _message_chars(message)
    return _ceil_tokens(chars) + TOKENS_PER_MESSAGE * len(items)


def _longest(body: Mapping[str, Any], field: str) -> int:
    """Embeddings, text completions: the longest single input (each is served on its own), or token ids."""
    data = body.get(field)
    if isinstance(data, list) and data and not isinstance(data[0], int):
        return max(_input_tokens(item) for item in data)
    return _input_tokens(data)


def _query_and_longest(body: Mapping[str, Any], field: str) -> int:
    """Rerank: the query plus the longest document."""
    documents = body.get(field)
    longest = max((_text_len([d]) for d in documents), default=0) if isinstance(documents, list) else 0
    return _ceil_tokens(_text_len(body.get("query")) + longest)


def _instructions_and_input(body: Mapping[str, Any], field: str) -> int:
    """Responses: the instructions and the input, a string or items (framing per item, at least one)."""
    chars = _text_len(body.get("instructions"))
    data = body.get(field)
    if isinstance(data, str):
        return _ceil_tokens(chars + len(data)) + TOKENS_PER_MESSAGE
    items = data if isinstance(data, list) else ()
    for item in items:
        chars += _message_chars(item)
    return _ceil_tokens(chars) + TOKENS_PER_MESSAGE * max(1, len(items))


# The prompt estimators an endpoint row names (`Endpoint.estimator`), each over the row's input field.
ESTIMATORS: dict[str, Callable[[Mapping[str, Any], str], int]] = {
    "messages": _messages,
    "longest": _longest,
    "query_and_longest": _query_and_longest,
    "instructions_and_input": _instructions_and_input,
}


# Each kind's estimator and the field it reads, from its row, looked up once per request (a kind without a
# row, or a row without an estimator and a field, is estimated as chat).
_ESTIMATE: dict[str, tuple[Callable[[Mapping[str, Any], str], int], str]] = {
    kind: (ESTIMATORS[row.estimator], row.input_field)
    for kind, row in OF_KIND.items()
    if row.estimator is not None and row.input_field is not None
}
_AS_CHAT = (_messages, "messages")


def estimate_tokens(kind: str, body: Mapping[str, Any]) -> int:
    """The prompt-size estimate compared against a model's context window: the kind's row's estimator over
    its input field (a kind without a row is estimated as chat)."""
    estimator, input_field = _ESTIMATE.get(kind, _AS_CHAT)
    return estimator(body, input_field)


def _is_one_of(value: Any, names: frozenset[str]) -> bool:
    """`value in names` for any JSON value: a list or object (unhashable) is never a name."""
    return isinstance(value, str) and value in names


def _has_image(items: Any) -> bool:
    """Any message / input item whose content has an image part."""
    if not isinstance(items, list):
        return False
    for item in items:  # `_is_one_of` inline: a call per message and part otherwise
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind in _IMAGE_PARTS:
            return True
        content = item.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and kind in _IMAGE_PARTS:
                    return True
    return False


def _structured(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and _is_one_of(fmt.get("type"), _STRUCTURED):
        return True
    text = body.get("text")  # Responses API: text.format
    if isinstance(text, dict):
        fmt = text.get("format")
        return isinstance(fmt, dict) and _is_one_of(fmt.get("type"), _STRUCTURED)
    return False


def requirements(kind: str, body: Mapping[str, Any]) -> Requirements:
    """Read what the request needs from its body (one pass over the messages, for images)."""
    max_output = None
    max_param = None
    for name in _MAX_OUTPUT_FIELDS:  # the largest one given: a dialect may send either
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and (max_output is None or value > max_output):
            max_output, max_param = value, name
    if kind in _NO_OUTPUT:
        return Requirements(kind=kind, max_output_tokens=max_output, max_output_param=max_param, body=body)
    tools = bool(body.get("tools")) or bool(body.get("functions"))
    messages = body.get("messages") if kind == "chat" else body.get("input")
    return Requirements(
        kind=kind,
        streaming=body.get("stream") is True,
        tools=tools,
        structured_output=_structured(body),
        vision=_has_image(messages),
        max_output_tokens=max_output,
        max_output_param=max_param,
        body=body,
    )


def missing(model: ModelSpec, req: Requirements) -> tuple[str, str] | None:
    """(skip reason, what is missing) when the model cannot serve, else None.

    What is missing is a capability name, "max_output_tokens" or "context_window".
    Undeclared capabilities count as missing; a model without a declared
    context_window is assumed to fit.
    """
    caps = model.capabilities
    for need in req.needs:
        if need not in caps and not (need == "responses" and "chat" in caps):  # Responses: translated to chat
            return UNSUPPORTED, need
    if (
        model.max_output_tokens is not None
        and req.max_output_tokens is not None
        and req.max_output_tokens > model.max_output_tokens
    ):
        return UNSUPPORTED, "max_output_tokens"
    if model.context_window is not None and req.estimated_tokens > model.context_window:
        return CONTEXT_LENGTH, "context_window"
    return None


def check_link(model: ModelSpec, req: Requirements) -> str | None:
    """None when the model can serve the request, else the skip reason."""
    result = missing(model, req)
    return None if result is None else result[0]


def apply(chain: Sequence[Link], req: Requirements) -> Sequence[Link]:
    """The chain with links that cannot serve marked skipped.

    Returns `chain` itself when every link can serve (the common case allocates
    nothing); links already skipped (denied, unknown) are left as they are.
    """
    marked: list[Link] | None = None
    for i, link in enumerate(chain):
        if link.skip_reason is not None:
            continue
        reason = check_link(link.model, req)
        if reason is not None:
            if marked is None:
                marked = list(chain)
            marked[i] = dataclasses.replace(link, skip_reason=reason)
    return chain if marked is None else marked


def servable(chain: Sequence[Link]) -> bool:
    """True when at least one link may be tried."""
    return any(link.skip_reason is None for link in chain)


def no_link_error(chain: Sequence[Link], req: Requirements) -> GatewayError:
    """The 400 for a chain none of whose links can serve, named after the requested model.

    The requested (first) link's own reason decides the code: a prompt too long for
    it gives `context_length_exceeded` (no fallback could take it either),
    anything it lacks gives `unsupported_capability` naming the capability.
    """
    target = None
    for link in chain:
        if link.skip_reason in (UNSUPPORTED, CONTEXT_LENGTH):
            target = link
            break
    if target is None:
        model_id = chain[0].model.id if chain else "?"
        return errors.no_servable_link(model_id)
    model = target.model
    found = missing(model, req)
    what = found[1] if found is not None else req.kind
    if what == "context_window":
        return errors.context_length_exceeded(
            model.id, req.estimated_tokens, model.context_window, _PROMPT_PARAM.get(req.kind)
        )
    if what == "max_output_tokens":
        return errors.max_output_exceeded(
            model.id, req.max_output_param, req.max_output_tokens, model.max_output_tokens
        )
    if what == req.kind:
        param = "model"
        hint = f"pick a model whose capabilities include {what}"
        dialect = model.provider.dialect
        if what in KINDS and what not in DIALECT_KINDS.get(dialect, KINDS):
            serving = " or ".join(d for d, kinds in DIALECT_KINDS.items() if what in kinds)
            hint = (
                f"its provider {model.provider.name!r} speaks the {dialect} dialect, which does not serve "
                f"{_KIND_NAMES.get(what, what)}: pick a model on a {serving} provider"
            )
        if what not in KINDS:
            hint = f"'{what}' is not a known capability; use one of {', '.join(sorted(KINDS))}"
    else:
        param = "input" if what == "vision" and req.kind == "responses" else _PARAM.get(what)
        hint = f"pick a model whose capabilities include {what}"
    return errors.unsupported_capability(model.id, what, hint, param)
