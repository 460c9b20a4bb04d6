"""Management tokens: the management API's credentials (docs/management-api.md#tokens).

Generated and stored like API keys (policies.keys: 240 random bits, a plain SHA-256),
with their own `sbm-` prefix so a gateway key and a management token are never
confused; a gateway API key is never a management token.
"""

from __future__ import annotations

import secrets

from policies.keys import hash_key
from policies.models import ManagementToken, Org

TOKEN_PREFIX = "sbm-"
PREFIX_LENGTH = 11


def create_management_token(
    *, name: str, scope: str = "read", org: Org | None = None, bodies: bool = False
) -> tuple[ManagementToken, str]:
    """Create and save a token; the plaintext is returned once and never stored.

    Only superusers create tokens (the admin page, the command), so `bodies` is theirs to grant.
    """
    if scope not in ("read", "write"):
        raise ValueError(f"scope {scope!r}: use read or write")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ManagementToken.objects.create(
        name=name, prefix=plaintext[:PREFIX_LENGTH], token_hash=hash_key(plaintext), scope=scope, org=org, bodies=bodies
    )
    return token, plaintext


def find_token(plaintext: str) -> ManagementToken | None:
    """The active token with this secret, or None (unknown or revoked)."""
    if not plaintext.startswith(TOKEN_PREFIX):
        return None
    return ManagementToken.objects.select_related("org").filter(token_hash=hash_key(plaintext), revoked=False).first()
