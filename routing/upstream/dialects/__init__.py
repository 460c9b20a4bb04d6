"""Dialect adapters: one per upstream API family, looked up by the provider's `dialect`."""

from __future__ import annotations

from routing.upstream.dialects.anthropic import AnthropicDialect
from routing.upstream.dialects.azure_openai import AzureOpenAIDialect
from routing.upstream.dialects.base import Dialect, ParsedResponse, PreparedRequest
from routing.upstream.dialects.bedrock import BedrockDialect
from routing.upstream.dialects.cohere import CohereDialect
from routing.upstream.dialects.gemini import GeminiDialect
from routing.upstream.dialects.ollama import OllamaDialect
from routing.upstream.dialects.openai import OpenAIDialect
from routing.upstream.dialects.tei import TEIDialect
from routing.upstream.dialects.vertex import VertexDialect

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (OpenAIDialect(), AnthropicDialect(), OllamaDialect(), TEIDialect(), CohereDialect(), BedrockDialect())
}
# Cloud providers' APIs (docs/providers.md), one row each.
DIALECTS.update({d.name: d for d in (AzureOpenAIDialect(), GeminiDialect(), VertexDialect())})


def get_dialect(name: str) -> Dialect:
    """The shared adapter for a dialect name (the keys of DIALECTS)."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; use one of {', '.join(DIALECTS)}") from None


__all__ = ["Dialect", "ParsedResponse", "PreparedRequest", "DIALECTS", "get_dialect"]
