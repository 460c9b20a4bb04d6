"""Request and response bodies for the request log, only for orgs that opted in (docs/operations.md#bodies).

Off by default: an org's `log_bodies: true` (or SWITCHBOARD_LOG_BODIES for every org)
turns it on. Only the body is kept, never a header (so no Authorization or x-api-key),
cut to SWITCHBOARD_LOG_BODY_BYTES, and the values of JSON keys that name a credential
are masked. Runs on the request path only for those orgs: one slice and one decode.
"""

from __future__ import annotations

import re

from django.conf import settings

MASK = "***"
# "api_key": "...", "authorization": "...", "password", "secret", "token" (not "max_tokens" / "prompt_tokens")
_SECRET_VALUE = re.compile(
    rb'("(?:[a-z_-]*api[_-]?key|authorization|password|[a-z_-]*secret|access_token|refresh_token|token)"\s*:\s*)"(?:[^"\\]|\\.)*"',
    re.IGNORECASE,
)


# The UsageRecord fields that hold bodies.
FIELDS = ("request_body", "response_body")
HIDDEN_NOTE = "stored, shown to superusers only"


def visible_to(user: object) -> bool:
    """Whether `user` may read stored bodies: active superusers only, on every page (docs/security.md#bodies).

    A body may hold anything a client sent (prompts, personal data), so staff who may
    read usage records (the Operators group) see only that bodies are stored.
    """
    return bool(getattr(user, "is_active", False) and getattr(user, "is_superuser", False))


def token_reads_bodies(token: object) -> bool:
    """Whether a management API token may read stored bodies: one a superuser created with `bodies`
    (docs/security.md#bodies). Without it, GET /api/v1/requests leaves the body fields out."""
    return bool(getattr(token, "bodies", False) and not getattr(token, "revoked", True))


def wanted(org: object) -> bool:
    """Whether this request's bodies are kept: the org opted in, or the global setting is on."""
    return bool(getattr(org, "log_bodies", False) or settings.SWITCHBOARD_LOG_BODIES)


def capture(raw: bytes | bytearray | memoryview | None) -> str:
    """The body as stored: credential values masked, at most SWITCHBOARD_LOG_BODY_BYTES, UTF-8 (invalid bytes replaced)."""
    if not raw:
        return ""
    cap = int(settings.SWITCHBOARD_LOG_BODY_BYTES)
    data = bytes(raw[: cap * 2])  # mask before cutting, so a cut never leaves half a secret
    data = _SECRET_VALUE.sub(rb'\1"' + MASK.encode() + rb'"', data)
    cut = len(data) > cap or len(raw) > cap * 2
    text = data[:cap].decode("utf-8", "replace")
    return text + f"… [cut at {cap} bytes of {len(raw)}]" if cut else text
