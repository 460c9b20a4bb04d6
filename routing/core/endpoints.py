"""The endpoints the gateway serves: one `Endpoint` row per route (docs/architecture.md#tables).

What `/v1/chat/completions` *is* — its path and method, the kind it is known by, the client
protocol it speaks, how its body is read and checked, whether it streams, is cached, produces
output tokens, how its prompt is estimated, how it is priced, its OpenAPI operation and its
OpenTelemetry operation name — is this one row. Routing (`routing.gateway.request`), the body
check (`routing.gateway.app`, `routing.gateway.body_schemas`), preflight, the cache key, the
rate limits' output allowance, the stream rule, both parts of the OpenAPI document, tracing and
the openai dialect's upstream paths read the table instead of keeping lists of their own, so
an endpoint is added here (plus its body schema and, if the gateway answers it itself, its
handler). Pure data: core imports nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass

JSON = "json"
MULTIPART = "multipart"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route of the API, and everything the request path decides from the route alone.

    `kind` is the name the request is known by: the usage record's and metrics' `endpoint`, the
    cache key's first part. `serves` is the endpoint kind the chain serves, which a model declares
    among its capabilities (routing.core.kinds.ENDPOINT_KINDS): the same as `kind`, "chat" for the
    Anthropic Messages endpoints (translated), None when the gateway answers alone. `reader` is how
    the body is read: "json" (routing.gateway.request.parse_body), "multipart"
    (routing.gateway.multipart.read_form), None for a request without a body (GET). `schema` is the
    OpenAPI component of the body a client sends (`OpenObject`: described as an open object); the
    body is checked against the msgspec shape of `serves` (routing.gateway.body_schemas.BODY_SCHEMAS).
    `handler` names the gateway's own answer (routing.gateway.app `_HANDLERS`); None: the chain's.
    """

    path: str  # a "{name}" segment matches the rest of the path (it may hold "/")
    method: str
    kind: str
    protocol: str  # the client protocol spoken: a routing.core.kinds.NATIVE_PROTOCOLS name, or "models"
    operation_id: str
    summary: str
    serves: str | None = None
    reader: str | None = JSON
    schema: str | None = "OpenObject"
    handler: str | None = None
    streams: bool = False  # `"stream": true` answers an event stream
    cacheable: bool = False  # the response cache may store a non-streamed answer (docs/cache.md)
    output: bool = True  # produces output tokens: the rate limits reserve an output allowance for it
    # What its usage record's cost counts, shown to clients as the operation's `x-switchboard-priced-by`:
    # "tokens" (prompt and completion tokens at the serving model's prices), "" (nothing: no upstream call).
    priced_by: str = "tokens"
    input_field: str | None = None  # the body field its prompt is in, for the context-length error's `param`
    estimator: str | None = None  # how preflight estimates its prompt (routing.plan.preflight.ESTIMATORS)
    upstream_path: str | None = None  # its path under an OpenAI-compatible base URL (the openai dialect's)
    title: str | None = None  # how error messages name the kind, when its name alone would not do
    genai_operation: str = ""  # the OpenTelemetry GenAI `gen_ai.operation.name` (docs/tracing.md#genai)

    @property
    def prefix(self) -> str | None:
        """The path's fixed part when it ends in a "{name}" segment (`/v1/models/`), else None."""
        at = self.path.find("{")
        return self.path[:at] if at >= 0 else None


# The order is the capabilities' order (routing.core.kinds.ENDPOINT_KINDS, the admin's checkboxes), the
# OpenAPI document's and the 404 message's.
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/v1/chat/completions",
        "POST",
        "chat",
        "chat",
        "createChatCompletion",
        "OpenAI Chat Completions; `stream: true` answers text/event-stream ending with `data: [DONE]`.",
        serves="chat",
        schema="ChatCompletionRequest",
        streams=True,
        cacheable=True,
        input_field="messages",
        estimator="messages",
        upstream_path="/chat/completions",
        genai_operation="chat",
    ),
    Endpoint(
        "/v1/embeddings",
        "POST",
        "embeddings",
        "embeddings",
        "createEmbedding",
        "OpenAI Embeddings.",
        serves="embeddings",
        schema="EmbeddingRequest",
        cacheable=True,
        output=False,
        input_field="input",
        estimator="longest",  # each input is embedded on its own
        upstream_path="/embeddings",
        genai_operation="embeddings",
    ),
    Endpoint(
        "/v1/rerank",
        "POST",
        "rerank",
        "rerank",
        "rerank",
        "Rerank documents against a query (Cohere/Jina/TEI shape).",
        serves="rerank",
        schema="RerankRequest",
        cacheable=True,
        output=False,
        input_field="documents",
        estimator="query_and_longest",
        upstream_path="/rerank",  # as vLLM / Jina serve it
        genai_operation="rerank",
    ),
    Endpoint(
        "/v1/responses",
        "POST",
        "responses",
        "responses",
        "createResponse",
        "OpenAI Responses, streamed or not; relayed from Responses upstreams, translated for the others.",
        serves="responses",
        streams=True,
        input_field="input",
        estimator="instructions_and_input",
        upstream_path="/responses",
        genai_operation="chat",
    ),
    Endpoint(
        "/v1/completions",
        "POST",
        "completions",
        "completions",
        "createCompletion",
        "OpenAI legacy text completions, on models with the `completions` capability (openai-dialect "
        "providers); `stream: true` answers text/event-stream ending with `data: [DONE]`.",
        serves="completions",
        schema="CompletionRequest",
        streams=True,
        input_field="prompt",
        estimator="longest",  # several prompts: the longest counts, each is a completion
        upstream_path="/completions",  # legacy text completions (vLLM, llama.cpp, OpenAI's instruct models)
        title="text completions (/v1/completions)",
        genai_operation="text_completion",
    ),
    Endpoint(
        "/v1/messages",
        "POST",
        "messages",
        "messages",
        "createMessage",
        "Anthropic Messages (errors in Anthropic's shape); `stream: true` answers Anthropic's event stream.",
        serves="chat",  # checked (routing.gateway.messages_fields), then served as chat
        streams=True,
        input_field="messages",
        estimator="messages",
        genai_operation="chat",
    ),
    Endpoint(
        "/v1/messages/count_tokens",
        "POST",
        "count_tokens",
        "messages",
        "countMessageTokens",
        "Anthropic token count of a Messages request.",
        serves="chat",
        handler="count_tokens",  # the preflight estimate, no upstream call
        output=False,
        priced_by="",
        input_field="messages",
        estimator="messages",
        genai_operation="count_tokens",
    ),
    Endpoint(
        "/v1/models",
        "GET",
        "models",
        "models",
        "listModels",
        "The models and aliases the calling key may use, OpenAI list shape.",
        reader=None,
        schema=None,
        handler="models",
        output=False,
        priced_by="",
        genai_operation="models",
    ),
    Endpoint(
        "/v1/models/{model}",
        "GET",
        "models",
        "models",
        "retrieveModel",
        "One model or alias the calling key may use, as in the list; 404 `model_not_found` for any other id "
        "(whether or not it exists).",
        reader=None,
        schema=None,
        handler="model",
        output=False,
        priced_by="",
        genai_operation="models",
    ),
)

BY_PATH: dict[str, Endpoint] = {e.path: e for e in ENDPOINTS if e.prefix is None}
_PREFIXED: tuple[tuple[str, Endpoint], ...] = tuple((e.prefix, e) for e in ENDPOINTS if e.prefix is not None)
# The endpoint kinds a model declares among its capabilities: the kinds the chain serves as themselves.
SERVED_KINDS: tuple[str, ...] = tuple(dict.fromkeys(e.kind for e in ENDPOINTS if e.serves == e.kind))
# Each kind's row where the chain serves it as itself (the row preflight, limits and messages read).
OF_KIND: dict[str, Endpoint] = {e.kind: e for e in ENDPOINTS if e.serves == e.kind}
# Where an OpenAI-compatible upstream serves each kind (the openai dialect's paths).
UPSTREAM_PATHS: dict[str, str] = {e.kind: e.upstream_path for e in ENDPOINTS if e.upstream_path is not None}


def route(path: str) -> Endpoint | None:
    """The row serving `path`, or None: one dict lookup for every fixed path; a path under a
    "{name}" row (`/v1/models/{model}`) needs something after its prefix."""
    row = BY_PATH.get(path)
    if row is not None:
        return row
    for prefix, row in _PREFIXED:
        if path.startswith(prefix) and len(path) > len(prefix):
            return row
    return None


def listing() -> str:
    """The endpoints by method, for the 404's message: "POST /v1/chat/completions, ... and GET /v1/models"."""
    by_method: dict[str, list[str]] = {}
    for e in ENDPOINTS:
        if e.prefix is None:
            by_method.setdefault(e.method, []).append(e.path)
    return " and ".join(f"{method} {', '.join(paths)}" for method, paths in by_method.items())


__all__ = [
    "BY_PATH",
    "ENDPOINTS",
    "JSON",
    "MULTIPART",
    "OF_KIND",
    "SERVED_KINDS",
    "UPSTREAM_PATHS",
    "Endpoint",
    "listing",
    "route",
]
