"""Small configuration documents and snapshots for policy tests (no database)."""

from __future__ import annotations

import copy
from typing import Any

from routing.config.snapshot import Snapshot, build_snapshot


def model(
    id: str, provider: str = "p1", caps: tuple[str, ...] = ("chat", "streaming", "tools"), **extra: Any
) -> dict[str, Any]:
    return {"id": id, "provider": provider, "upstream_model": f"up-{id}", "capabilities": list(caps), **extra}


def document(
    models: list[dict[str, Any]] | None = None,
    policies: list[dict[str, Any]] | None = None,
    default_action: str = "allow",
    credentials: list[dict[str, Any]] | None = None,
    aliases: dict[str, str] | None = None,
    resilience: dict[str, Any] | None = None,
    agents: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    org: dict[str, Any] = {"name": "acme", "default_action": default_action}
    if policies is not None:
        org["policies"] = policies
    if credentials is not None:
        org["credentials"] = credentials
    if agents is not None:
        org["agents"] = agents
    return {
        "resilience": resilience or {},
        "providers": [
            {
                "name": "p1",
                "dialect": "openai",
                "base_url": "http://127.0.0.1:9001/v1",
                "api_key_env": "SWITCHBOARD_UPSTREAM_P1",
            },
            {
                "name": "p2",
                "dialect": "openai",
                "base_url": "http://127.0.0.1:9002/v1",
                "api_key_env": "SWITCHBOARD_UPSTREAM_P2",
            },
        ],
        "models": copy.deepcopy(
            models if models is not None else [model("chat-a", fallbacks=["chat-b"]), model("chat-b", provider="p2")]
        ),
        "aliases": aliases or {},
        "orgs": [org, {"name": "other", "default_action": "allow"}],
    }


ENV = {
    "SWITCHBOARD_UPSTREAM_P1": "platform-1",
    "SWITCHBOARD_UPSTREAM_P2": "platform-2",
    "SWITCHBOARD_UPSTREAM_ACME": "acme-own",
}


def snapshot(**kwargs: Any) -> Snapshot:
    return build_snapshot(document(**kwargs), [], ENV)
