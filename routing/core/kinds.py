"""The endpoint kinds the gateway serves, and the one table of what each dialect serves.

A model's capability manifest names the kinds it serves among its capabilities;
preflight, validation (capability checks along a chain), the dialects and
explain_route all take the list from here. The kinds are the endpoint table's
(routing.core.endpoints): a kind is an endpoint row the chain serves as itself.
"""

from __future__ import annotations

from routing.core.endpoints import SERVED_KINDS, UPSTREAM_PATHS

ENDPOINT_KINDS: tuple[str, ...] = SERVED_KINDS
# The kinds an OpenAI-compatible upstream serves: every endpoint row with an upstream path.
_OPENAI_KINDS = frozenset(UPSTREAM_PATHS)

# The endpoint kinds each dialect's adapter can serve (routing.upstream.dialects.base.Dialect.kinds), for the
# deployment rule "the provider's dialect serves the model's kinds" (docs/deployments.md#validation).
DIALECT_KINDS: dict[str, frozenset[str]] = {
    "openai": _OPENAI_KINDS,
    "anthropic": frozenset({"chat", "responses"}),  # responses: translated to chat (routing.gateway.responses)
    "ollama": frozenset({"chat", "embeddings"}),
    "tei": frozenset({"embeddings", "rerank"}),
    "cohere": frozenset({"embeddings", "rerank"}),
    "bedrock": frozenset({"chat", "responses"}),
}
DIALECT_KINDS.update(  # cloud providers' APIs (docs/providers.md)
    {
        "azure_openai": frozenset({"chat", "embeddings", "responses"}),
        "gemini": frozenset({"chat", "embeddings", "responses"}),
        "vertex": frozenset({"chat", "responses"}),
    }
)
# The one dialect table: a new dialect is a row above (and its adapter), never a migration. Validation,
# the admin's select, the schema and the adapters (`Dialect.kinds`) read it.
DIALECTS: tuple[str, ...] = tuple(DIALECT_KINDS)

# The client protocols each dialect's upstream speaks itself: a request in one of them goes up as the
# client sent it (only `model` replaced) and its answer comes back as sent, with no translation either way
# (docs/anthropic-messages.md#passthrough). "messages" is Anthropic's Messages API; Vertex speaks it
# for Claude models only (its adapter narrows the row by model). The others are reached by translation.
NATIVE_PROTOCOLS: dict[str, frozenset[str]] = {
    "openai": _OPENAI_KINDS,
    "azure_openai": frozenset({"chat", "responses", "embeddings"}),
    "anthropic": frozenset({"messages"}),
    "vertex": frozenset({"messages"}),
}
