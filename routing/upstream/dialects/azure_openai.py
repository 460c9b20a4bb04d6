"""Azure OpenAI: the OpenAI shapes at per-deployment URLs with `api-version` (docs/providers.md#azure_openai).

base_url is the resource's `https://{resource}.openai.azure.com/openai`, optionally with
`?api-version=...` (default `DEFAULT_API_VERSION`); the model's `upstream_model` is the
Azure deployment name. Bodies and answers are the OpenAI ones, relayed as the openai
dialect relays them. Credentials: an API key goes in the `api-key` header; an Entra ID
access token (a JWT, recognised by its shape) goes as `Authorization: Bearer`.

Content filtering needs nothing here: a filtered answer is a 200 whose finish_reason is
`content_filter` (relayed), and a filtered prompt is a 400 `content_filter` error, which
routing.core.errors classifies as a content-filter refusal (a client error, never a
breaker failure). `retry-after-ms` is read there too.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.upstream.dialects.base import Dialect, ParsedResponse, PreparedRequest, encode, parsed_openai, unsupported

DEFAULT_API_VERSION = "2024-10-21"  # the current GA data-plane version
# The Responses API is served at the resource level (the deployment goes in `model`) and needs a newer version.
RESPONSES_API_VERSION = "2025-04-01-preview"
DEPLOYMENT_PATHS = {"chat": "/chat/completions", "embeddings": "/embeddings"}
_JWT = re.compile(r"^eyJ[\w-]*\.[\w-]+\.[\w-]*$")


@lru_cache(maxsize=256)
def split_base(base_url: str) -> tuple[str, str]:
    """(resource URL without query, api-version) of a provider's base_url; parsed once per URL."""
    parts = urlsplit(base_url)
    query = dict(parse_qsl(parts.query))
    version = query.get("api-version") or DEFAULT_API_VERSION
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", "")), version


def is_entra_token(secret: str) -> bool:
    """An Entra ID access token is a JWT; Azure API keys never contain dots."""
    return bool(_JWT.match(secret))


class AzureOpenAIDialect(Dialect):
    name = "azure_openai"
    stream_usage_option = True  # Azure honours stream_options.include_usage since 2024-09-01

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        root, version = split_base(base_url)
        if kind == "responses":
            version = version if version.endswith("preview") else RESPONSES_API_VERSION
            url = f"{root}/responses?{urlencode({'api-version': version})}"
        elif kind in DEPLOYMENT_PATHS:
            path = DEPLOYMENT_PATHS[kind]
            url = (
                f"{root}/deployments/{quote(model.upstream_model, safe='')}{path}?{urlencode({'api-version': version})}"
            )
        else:
            raise unsupported(self.name, kind, model)
        headers = {"Content-Type": "application/json", **self.auth_headers(api_key)}
        return PreparedRequest("POST", url, headers, encode({**body, "model": model.upstream_model}))

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        return parsed_openai(body, model)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        if not api_key:
            return {}
        if is_entra_token(api_key):
            return {"Authorization": "Bearer " + api_key}
        return {"api-key": api_key}

    def health_url(self, provider: ProviderSpec) -> str:
        root, version = split_base(provider.base_url)
        return f"{root}{provider.health_check_path or '/models'}?{urlencode({'api-version': version})}"
