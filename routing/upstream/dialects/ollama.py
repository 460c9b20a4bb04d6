"""Ollama through its OpenAI-compatible API (base_url like http://host:11434/v1)."""

from __future__ import annotations

from routing.config.snapshot import ProviderSpec
from routing.upstream.dialects.base import join_url
from routing.upstream.dialects.openai import OpenAIDialect


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
