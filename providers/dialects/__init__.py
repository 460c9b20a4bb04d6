"""Dialect adapters: one per upstream API family, looked up by the provider's `dialect`."""

from __future__ import annotations

from providers.dialects.anthropic import AnthropicDialect
from providers.dialects.base import Dialect, ParsedResponse, PreparedRequest
from providers.dialects.bedrock import BedrockDialect
from providers.dialects.cohere import CohereDialect
from providers.dialects.ollama import OllamaDialect
from providers.dialects.openai import OpenAIDialect
from providers.dialects.tei import TEIDialect

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (OpenAIDialect(), AnthropicDialect(), OllamaDialect(), TEIDialect(), CohereDialect(), BedrockDialect())
}


def get_dialect(name: str) -> Dialect:
    """The shared adapter for a dialect name (openai | anthropic | ollama | tei | cohere | bedrock)."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; use one of {', '.join(DIALECTS)}") from None


__all__ = ["Dialect", "ParsedResponse", "PreparedRequest", "DIALECTS", "get_dialect"]
