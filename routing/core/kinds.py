"""The endpoint kinds the gateway serves: the one list every floor reads.

A model's capability manifest names the kinds it serves among its capabilities;
preflight, validation (capability checks along a chain), the dialects and
explain_route all take the list from here.
"""

from __future__ import annotations

ENDPOINT_KINDS: tuple[str, ...] = ("chat", "embeddings", "rerank", "responses", "completions")
