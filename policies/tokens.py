"""Management tokens: the management API's credentials (docs/management-api.md#tokens).

Generated and stored like API keys (policies.keys: 240 random bits, a plain SHA-256),
with their own `sbm-` prefix so a gateway key and a management token are never
confused; a gateway API key is never a management token.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from policies.keys import hash_key
from policies.models import ManagementToken, Org

TOKEN_PREFIX = "sbm-"
PREFIX_LENGTH = 11


def create_management_token(
    *,
    name: str,
    scope: str = "read",
    org: Org | None = None,
    bodies: bool = False,
    expires_at: datetime | None = None,
) -> tuple[ManagementToken, str]:
    """Create and save a token; the plaintext is returned once and never stored.

    Only superusers create tokens (the admin page, the command), so `bodies` is theirs to grant.
    `expires_at` (None: never) bounds how long a token handed to a portal or a script stays usable.
    """
    if scope not in ("read", "write"):
        raise ValueError(f"scope {scope!r}: use read or write")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = ManagementToken.objects.create(
        name=name,
        prefix=plaintext[:PREFIX_LENGTH],
        token_hash=hash_key(plaintext),
        scope=scope,
        org=org,
        bodies=bodies,
        expires_at=expires_at,
    )
    return token, plaintext


def find_token(plaintext: str, now: datetime | None = None) -> ManagementToken | None:
    """The active token with this secret, or None (unknown, revoked or expired: the caller cannot tell which)."""
    if not plaintext.startswith(TOKEN_PREFIX):
        return None
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now())
    tokens = ManagementToken.objects.select_related("org").filter(live, token_hash=hash_key(plaintext), revoked=False)
    return tokens.first()
