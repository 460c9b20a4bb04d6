"""Request shapes checked at the edge, before any upstream call (docs/request-validation.md).

A malformed body that reached an upstream used to cost everyone: OpenAI-compatible
servers answer many of them with a 500, which the gateway retried, failed over and
charged to the shared circuit breaker. So every field the OpenAI API defines (and
every field a dialect translates) is checked here, by msgspec structs: one C-level
`msgspec.convert` over the already-parsed body, no copy kept, unknown fields ignored
(they still pass through to the upstream unchanged). A violation is a 400
`invalid_request` whose `param` names the field, e.g. `messages[0].role`.

Each endpoint kind the chain serves (an endpoint row's `serves`, routing.core.endpoints) has a
`BodySchema` in `BODY_SCHEMAS`, and the body a client sends is described for the OpenAPI document by
its component in `COMPONENTS` (the name its endpoint row's `schema` gives): a new endpoint's
schema is these two entries, in this one module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from routing.core import errors

# Sane bounds (docs/request-validation.md#bounds).
MAX_OUTPUT_TOKENS = 1 << 20
MAX_N = 128
MAX_STOP = 4
MAX_EMBEDDING_INPUTS = 2048
MAX_DIMENSIONS = 1 << 16
INT64 = (-(1 << 63), (1 << 63) - 1)
# orjson encodes at most this many nested arrays/objects; the body itself is the first.
MAX_DEPTH = 254
_SHALLOW_BYTES = 2 * MAX_DEPTH

Unset = UnsetType
Str = str | Unset
NStr = str | None | Unset
NBool = bool | None | Unset
Obj = dict[str, Any]
NObj = Obj | None | Unset
PosTokens = Annotated[int, Meta(ge=1, le=MAX_OUTPUT_TOKENS)]
Temperature = Annotated[float, Meta(ge=0, le=2)]
TopP = Annotated[float, Meta(ge=0, le=1)]
Penalty = Annotated[float, Meta(ge=-2, le=2)]
Seed = Annotated[int, Meta(ge=INT64[0], le=INT64[1])]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
TokenId = Annotated[str, Meta(pattern=r"^[0-9]+$")]
Bias = Annotated[float, Meta(ge=-100, le=100)]
Metadata = dict[str, str]


# --- chat completions: message content -------------------------------------------


class ImageURL(Struct):
    url: str
    detail: Str = UNSET


class InputAudio(Struct):
    data: str
    format: str


class FileRef(Struct):
    file_data: Str = UNSET
    file_id: Str = UNSET
    filename: Str = UNSET


class Part(Struct):
    """A content part. Known types need their payload field; other types pass through."""

    type: str
    text: Str = UNSET
    image_url: str | ImageURL | Unset = UNSET
    input_audio: InputAudio | Unset = UNSET
    file: FileRef | Unset = UNSET
    refusal: Str = UNSET


# The field a content part of a known type must carry.
_PART_PAYLOAD = {"text": "text", "image_url": "image_url", "input_audio": "input_audio", "file": "file"}
Content = str | list[Part]


class FunctionCall(Struct):
    name: str
    arguments: str


class CustomCall(Struct):
    name: str
    input: str


class FunctionToolCall(Struct, tag_field="type", tag="function"):
    id: str
    function: FunctionCall


class CustomToolCall(Struct, tag_field="type", tag="custom"):
    id: str
    custom: CustomCall


class _Message(Struct, tag_field="role", kw_only=True):
    name: Str = UNSET


class SystemMessage(_Message, tag="system"):
    content: Content


class DeveloperMessage(_Message, tag="developer"):
    content: Content


class UserMessage(_Message, tag="user"):
    content: Content


class AssistantMessage(_Message, tag="assistant"):
    content: Content | None | Unset = UNSET
    refusal: NStr = UNSET
    tool_calls: list[FunctionToolCall | CustomToolCall] | None | Unset = UNSET
    function_call: FunctionCall | None | Unset = UNSET
    audio: NObj = UNSET


class ToolMessage(_Message, tag="tool"):
    content: Content
    tool_call_id: str


class FunctionMessage(Struct, tag_field="role", tag="function"):
    name: str
    content: str | None


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage


# --- chat completions: tools and formats ------------------------------------------


class FunctionDef(Struct):
    name: Annotated[str, Meta(min_length=1)]
    description: Str = UNSET
    parameters: Obj | Unset = UNSET
    strict: NBool = UNSET


class CustomDef(Struct):
    name: Annotated[str, Meta(min_length=1)]
    description: Str = UNSET
    format: Obj | Unset = UNSET


class FunctionTool(Struct, tag_field="type", tag="function"):
    function: FunctionDef


class CustomTool(Struct, tag_field="type", tag="custom"):
    custom: CustomDef


class Named(Struct):
    name: str


class FunctionChoice(Struct, tag_field="type", tag="function"):
    function: Named


class CustomChoice(Struct, tag_field="type", tag="custom"):
    custom: Named


class AllowedTools(Struct):
    mode: Literal["auto", "required"]
    tools: list[Obj]


class AllowedToolsChoice(Struct, tag_field="type", tag="allowed_tools"):
    allowed_tools: AllowedTools


ToolChoice = Literal["none", "auto", "required"] | FunctionChoice | CustomChoice | AllowedToolsChoice


class TextFormat(Struct, tag_field="type", tag="text"):
    pass


class JSONObjectFormat(Struct, tag_field="type", tag="json_object"):
    pass


class JSONSchema(Struct):
    name: Annotated[str, Meta(min_length=1)]
    description: Str = UNSET
    schema: Obj | Unset = UNSET
    strict: NBool = UNSET


class JSONSchemaFormat(Struct, tag_field="type", tag="json_schema"):
    json_schema: JSONSchema


class StreamOptions(Struct):
    include_usage: NBool = UNSET
    include_obfuscation: NBool = UNSET


class ChatRequest(Struct):
    messages: Annotated[list[Message], Meta(min_length=1)]
    model: NStr = UNSET
    stream: NBool = UNSET
    stream_options: StreamOptions | None | Unset = UNSET
    temperature: Temperature | None | Unset = UNSET
    top_p: TopP | None | Unset = UNSET
    top_k: Annotated[int, Meta(ge=0)] | None | Unset = UNSET
    n: Annotated[int, Meta(ge=1, le=MAX_N)] | None | Unset = UNSET
    max_tokens: PosTokens | None | Unset = UNSET
    max_completion_tokens: PosTokens | None | Unset = UNSET
    stop: str | Annotated[list[str], Meta(max_length=MAX_STOP)] | None | Unset = UNSET
    presence_penalty: Penalty | None | Unset = UNSET
    frequency_penalty: Penalty | None | Unset = UNSET
    logit_bias: dict[TokenId, Bias] | None | Unset = UNSET
    logprobs: NBool = UNSET
    top_logprobs: TopLogprobs | None | Unset = UNSET
    seed: Seed | None | Unset = UNSET
    user: NStr = UNSET
    safety_identifier: NStr = UNSET
    prompt_cache_key: NStr = UNSET
    tools: list[FunctionTool | CustomTool] | None | Unset = UNSET
    tool_choice: ToolChoice | None | Unset = UNSET
    parallel_tool_calls: NBool = UNSET
    functions: list[FunctionDef] | None | Unset = UNSET
    function_call: Literal["none", "auto"] | Named | None | Unset = UNSET
    response_format: TextFormat | JSONObjectFormat | JSONSchemaFormat | None | Unset = UNSET
    metadata: Metadata | None | Unset = UNSET
    modalities: list[str] | None | Unset = UNSET
    reasoning_effort: NStr = UNSET
    service_tier: NStr = UNSET
    verbosity: NStr = UNSET
    store: NBool = UNSET
    prediction: NObj = UNSET
    audio: NObj = UNSET
    web_search_options: NObj = UNSET


def _check_chat(req: ChatRequest) -> None:
    for i, message in enumerate(req.messages):
        content = getattr(message, "content", None)
        if type(content) is list:
            for j, part in enumerate(content):
                need = _PART_PAYLOAD.get(part.type)
                if need is not None and getattr(part, need) is UNSET:
                    param = f"messages[{i}].content[{j}].{need}"
                    raise errors.invalid_field(param, f"a content part of type '{part.type}' needs '{need}'")


# --- embeddings, rerank, responses --------------------------------------------------

TokenIdInt = Annotated[int, Meta(ge=0)]
TokenIds = Annotated[list[TokenIdInt], Meta(min_length=1)]
NonEmptyStr = Annotated[str, Meta(min_length=1)]


class EmbeddingsRequest(Struct):
    input: (
        NonEmptyStr
        | Annotated[list[NonEmptyStr | TokenIdInt | TokenIds], Meta(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    )
    model: NStr = UNSET
    dimensions: Annotated[int, Meta(ge=1, le=MAX_DIMENSIONS)] | None | Unset = UNSET
    encoding_format: Literal["float", "base64"] | None | Unset = UNSET
    user: NStr = UNSET
    input_type: NStr = UNSET


def _check_embeddings(req: EmbeddingsRequest) -> None:
    items = req.input
    if type(items) is list and len(set(map(type, items))) > 1:
        first = type(items[0])
        i = next(i for i, item in enumerate(items) if type(item) is not first)
        raise errors.invalid_field(
            f"input[{i}]", "every input must be of one kind: all strings, all token ids, or all lists of token ids"
        )


class RerankDocument(Struct):
    text: str


class RerankRequest(Struct):
    query: str
    documents: Annotated[list[str | RerankDocument], Meta(min_length=1)]
    model: NStr = UNSET
    top_n: Annotated[int, Meta(ge=1)] | None | Unset = UNSET
    return_documents: NBool = UNSET
    max_chunks_per_doc: Annotated[int, Meta(ge=1)] | None | Unset = UNSET


class ResponsePart(Struct):
    type: str
    text: NStr = UNSET


class ResponseItem(Struct):
    """An input item: a message (role + content) or any typed item, passed through.

    Nullable where OpenAI's own item types are: a client that keeps no state (Codex, `store:
    false`) echoes its earlier output items back as it got them, e.g. a reasoning item with
    `"content": null`, `"encrypted_content": null` or `"status": null`. Item types and fields
    not named here pass through unchecked.
    """

    type: NStr = UNSET
    id: NStr = UNSET
    status: NStr = UNSET
    role: Literal["user", "assistant", "system", "developer"] | None | Unset = UNSET
    content: str | list[ResponsePart] | None | Unset = UNSET
    summary: list[Obj] | None | Unset = UNSET
    encrypted_content: NStr = UNSET


class Typed(Struct):
    type: str


class TextConfig(Struct):
    format: Typed | Unset = UNSET
    verbosity: NStr = UNSET


class ResponsesRequest(Struct):
    model: NStr = UNSET
    input: str | list[ResponseItem] | None | Unset = UNSET
    instructions: NStr = UNSET
    stream: NBool = UNSET
    max_output_tokens: PosTokens | None | Unset = UNSET
    max_tool_calls: Annotated[int, Meta(ge=1)] | None | Unset = UNSET
    temperature: Temperature | None | Unset = UNSET
    top_p: TopP | None | Unset = UNSET
    top_logprobs: TopLogprobs | None | Unset = UNSET
    tools: list[Typed] | None | Unset = UNSET
    tool_choice: Literal["none", "auto", "required"] | Typed | None | Unset = UNSET
    parallel_tool_calls: NBool = UNSET
    text: TextConfig | None | Unset = UNSET
    reasoning: NObj = UNSET
    include: list[str] | None | Unset = UNSET
    metadata: Metadata | None | Unset = UNSET
    previous_response_id: NStr = UNSET
    store: NBool = UNSET
    background: NBool = UNSET
    truncation: NStr = UNSET
    user: NStr = UNSET
    safety_identifier: NStr = UNSET
    prompt_cache_key: NStr = UNSET
    service_tier: NStr = UNSET


class CompletionsRequest(Struct):
    """Legacy text completions (OpenAI's /v1/completions, as vLLM and llama.cpp serve it)."""

    prompt: str | Annotated[list[str | TokenIdInt | TokenIds], Meta(min_length=1)]
    model: NStr = UNSET
    stream: NBool = UNSET
    stream_options: StreamOptions | None | Unset = UNSET
    max_tokens: PosTokens | None | Unset = UNSET
    temperature: Temperature | None | Unset = UNSET
    top_p: TopP | None | Unset = UNSET
    n: Annotated[int, Meta(ge=1, le=MAX_N)] | None | Unset = UNSET
    best_of: Annotated[int, Meta(ge=1, le=MAX_N)] | None | Unset = UNSET
    stop: str | Annotated[list[str], Meta(max_length=MAX_STOP)] | None | Unset = UNSET
    presence_penalty: Penalty | None | Unset = UNSET
    frequency_penalty: Penalty | None | Unset = UNSET
    logit_bias: dict[TokenId, Bias] | None | Unset = UNSET
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None | Unset = UNSET
    echo: NBool = UNSET
    suffix: NStr = UNSET
    seed: Seed | None | Unset = UNSET
    user: NStr = UNSET


# --- the registry and the check --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BodySchema:
    """One endpoint's body type, and an optional check of what a type cannot say."""

    type: type
    extra: Callable[[Any], None] | None = None


BODY_SCHEMAS: dict[str, BodySchema] = {
    "chat": BodySchema(ChatRequest, _check_chat),
    "embeddings": BodySchema(EmbeddingsRequest, _check_embeddings),
    "rerank": BodySchema(RerankRequest),
    "responses": BodySchema(ResponsesRequest),
    "completions": BodySchema(CompletionsRequest),
}


def _open(required: list[str], **properties: Any) -> dict[str, Any]:
    """An OpenAPI request body schema: the main fields, the rest passed through (additionalProperties)."""
    return {"type": "object", "additionalProperties": True, "required": required, "properties": properties}


_MESSAGES = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["role"],
        "additionalProperties": True,
        "properties": {"role": {"type": "string"}, "content": {}},
    },
}
# The OpenAPI components describing request bodies (docs/api.md#openapi), by the name an endpoint row's
# `schema` gives; a row whose schema is "OpenObject" is described as an open object.
COMPONENTS: dict[str, dict[str, Any]] = {
    "ChatCompletionRequest": _open(
        ["messages"],
        model={"type": "string", "description": "A model id or alias; optional when the agent has a default model."},
        messages=_MESSAGES,
        stream={"type": "boolean"},
        max_tokens={"type": "integer", "minimum": 1},
    ),
    "CompletionRequest": _open(
        ["prompt"],
        model={"type": "string", "description": "A model id or alias with the `completions` capability."},
        prompt={
            "description": "A string, or a list of strings or token ids.",
            "oneOf": [{"type": "string"}, {"type": "array", "minItems": 1}],
        },
        stream={"type": "boolean"},
        max_tokens={"type": "integer", "minimum": 1},
    ),
    "EmbeddingRequest": _open(["input"], model={"type": "string"}, input={}),
    "RerankRequest": _open(
        ["query", "documents"],
        model={"type": "string"},
        query={"type": "string"},
        documents={"type": "array", "items": {"type": "string"}},
        top_n={"type": "integer", "minimum": 1},
    ),
}


def register(kind: str, shape: BodySchema) -> None:
    """Add (or replace) the shape of an endpoint kind, e.g. the Anthropic Messages API."""
    BODY_SCHEMAS[kind] = shape


def check(kind: str, body: dict[str, Any], raw: bytes) -> None:
    """Raise 400 `invalid_request` naming the field when `body` is not a valid `kind` request.

    `raw` is the body's bytes, used only to skip the depth check: a body shorter than
    an opening and a closing bracket per level cannot be nested past the limit. A valid
    body converts once, here (no helper call on the request path); only a refused one is
    looked at again (`_whole_numbers_fixed`).
    """
    shape = BODY_SCHEMAS.get(kind)
    if shape is not None:
        try:
            value = msgspec.convert(body, shape.type)
        except msgspec.ValidationError as exc:
            value = _whole_numbers_fixed(body, shape.type, exc)
        if shape.extra is not None:
            shape.extra(value)
    check_depth_of(body, raw)


def check_fields(kind: str, body: dict[str, Any]) -> None:
    """`check` without the depth check: for a form (routing.gateway.multipart), which is flat (no
    bytes given: the depth check is skipped)."""
    check(kind, body, b"")


def _whole_numbers_fixed(body: dict[str, Any], shape: Any, exc: msgspec.ValidationError) -> Any:
    """`body` converted after msgspec refused it with `exc`, whole-number floats (`"n": 1.0`) turned into
    ints where the schema says integer: JSON Schema, and so the OpenAI API, counts a number with a zero
    fraction as an integer (docs/request-validation.md#integers). The body is fixed in place, so the
    upstream gets `1`. Anything else refused raises 400 naming the field."""
    for _ in range(_MAX_WHOLE_FIXES):
        if not _fix_whole_number(body, str(exc)):
            raise _field_error(str(exc)) from None
        try:
            return msgspec.convert(body, shape)
        except msgspec.ValidationError as again:
            exc = again
    raise _field_error(str(exc)) from None


def _fix_whole_number(body: dict[str, Any], text: str) -> bool:
    """Turn the float msgspec refused as an int into one when it has no fraction (a token-id list: all
    of that list's at once); False when there is nothing to fix."""
    match = _AT.match(text)
    if match is None or not _FLOAT_FOR_INT.match(match.group("detail")) or not match.group("path"):
        return False
    steps = [int(index) if index else name for name, index in _STEP.findall(match.group("path"))]
    parent: Any = body
    try:
        for step in steps[:-1]:
            parent = parent[step]
        value = parent[steps[-1]]
    except (KeyError, IndexError, TypeError):
        return False
    if not steps or not isinstance(value, float) or not value.is_integer():
        return False
    if isinstance(parent, list):
        parent[:] = [int(v) if isinstance(v, float) and v.is_integer() else v for v in parent]
    else:
        parent[steps[-1]] = int(value)
    return True


def check_depth_of(body: dict[str, Any], raw: bytes) -> None:
    """`check_depth` for a body of `raw` bytes, skipped when it is too short to be that deep.

    A translated endpoint (the Anthropic Messages API) calls it before its translation,
    which encodes parts of the body (tool inputs) itself.
    """
    if len(raw) > _SHALLOW_BYTES:
        check_depth(body)


def check_depth(body: dict[str, Any]) -> None:
    """400 when the body nests deeper than the upstream encoder accepts (naming the field).

    The check is a trial encode, the exact test the dialect's encoder will apply: about
    0.1 µs a KiB, several times cheaper than counting brackets in the raw bytes.
    """
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError:
        param = next((name for name, value in body.items() if not _encodes(value)), None)
        raise errors.nested_too_deep(MAX_DEPTH, param) from None


def _encodes(value: Any) -> bool:
    try:
        orjson.dumps([value])
    except orjson.JSONEncodeError:
        return False
    return True


_AT = re.compile(r"^(?P<detail>.*?)(?: - at (?:`key` in )?`\$(?P<path>[^`]*)`)?$", re.S)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_INDEX = re.compile(r"\[\d+\]")
_FLOAT_FOR_INT = re.compile(r"^Expected `int[^`]*`, got `float`")
_STEP = re.compile(r"\.([^.\[`]+)|\[(\d+)\]")
_MAX_WHOLE_FIXES = 16  # integer fields of one body (token-id lists are fixed a list at a time)
# Allowed values of each tagged or enumerated field, for a message that says what to send instead.
_ALLOWED = {
    "messages[].role": "system, developer, user, assistant, tool, function",
    "messages[].tool_calls[].type": "function, custom",
    "tools[].type": "function, custom",
    "tool_choice": "none, auto, required, or a {type: function|custom|allowed_tools} object",
    "tool_choice.type": "function, custom, allowed_tools",
    "tool_choice.allowed_tools.mode": "auto, required",
    "function_call": "none, auto, or {name}",
    "response_format.type": "text, json_object, json_schema",
    "encoding_format": "float, base64",
    "input[].role": "user, assistant, system, developer",
}


def _field_error(text: str) -> errors.GatewayError:
    """msgspec's message ('Expected `int` >= 1 - at `$.max_tokens`') as a 400 naming the field."""
    match = _AT.match(text)
    detail = match.group("detail") if match else text
    path = (match.group("path") or "") if match else ""
    param = path.replace("[...]", "")
    param = param[1:] if param.startswith(".") else param
    missing = _MISSING.match(detail)
    if missing:
        field = missing.group("field")
        param = f"{param}.{field}" if param else field
        return errors.invalid_field(param, "this field is required")
    if _FLOAT_FOR_INT.match(detail):
        return errors.invalid_field(param or None, "must be a whole number such as 2 (2.0 is fine too), not a fraction")
    allowed = _ALLOWED.get(_INDEX.sub("[]", param))
    for prefix in ("Invalid enum value ", "Invalid value "):
        if allowed is not None and detail.startswith(prefix):
            return errors.invalid_field(param, f"{detail[len(prefix) :]} is not one of {allowed}")
    return errors.invalid_field(param or None, detail[:1].lower() + detail[1:])


__all__ = [
    "COMPONENTS",
    "MAX_DEPTH",
    "BODY_SCHEMAS",
    "BodySchema",
    "check",
    "check_depth",
    "check_depth_of",
    "check_fields",
    "register",
]
