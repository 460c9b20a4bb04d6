"""Which request paths the gateway answers itself (docs/request-validation.md#paths).

Everything that looks like the API — `/v1` in any case, with doubled slashes, bare
`/v1` or `/v1/` — belongs to the gateway, so a mistyped API path gets a JSON 404 in
the API's error shape naming the endpoints, never Django's HTML page.
"""

from __future__ import annotations


def is_gateway_path(path: str) -> bool:
    """True for /health* and for any path whose first segment is `v1` (any case, any slashes)."""
    if path.startswith("/v1/") or path.startswith("/health"):
        return True
    head = path.lstrip("/")[:3]
    return head[:2].lower() == "v1" and (len(head) == 2 or head[2] == "/")
