"""Ollama through its OpenAI-compatible API (base_url like http://host:11434/v1)."""

from __future__ import annotations

from providers.dialects.base import join_url
from providers.dialects.openai import OpenAIDialect
from routing.config.snapshot import ProviderSpec


class OllamaDialect(OpenAIDialect):
    name = "ollama"

    def health_url(self, provider: ProviderSpec) -> str:
        """`/api/tags` on Ollama's native root (lists the pulled models) unless a path is set."""
        if provider.health_check_path:
            return join_url(provider.base_url, provider.health_check_path)
        base = provider.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        return base + "/api/tags"
