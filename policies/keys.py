"""API keys: generated once, shown once, stored as a hash (docs/api.md#authentication).

Keys carry 240 random bits, so a plain SHA-256 is the right hash: salting and
slow hashing (bcrypt, argon2) protect low-entropy passwords against guessing,
which is hopeless here anyway, and an unsalted digest lets the request path find
a key with one dictionary lookup instead of a scan.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from policies.models import Agent, ApiKey

KEY_PREFIX = "sb-"
PREFIX_LENGTH = 10


def hash_key(plaintext: str) -> str:
    """SHA-256 hex of the key, as stored in ApiKey.key_hash and looked up per request."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def generate_key() -> tuple[str, str, str]:
    """A new key as (plaintext, display prefix, sha256 hex); `sb-` + 40 urlsafe characters."""
    plaintext = KEY_PREFIX + secrets.token_urlsafe(30)
    return plaintext, plaintext[:PREFIX_LENGTH], hash_key(plaintext)


@transaction.atomic
def create_api_key(
    *, agent: Agent, label: str = "", expires_at: datetime | None = None, note: str = ""
) -> tuple[ApiKey, str]:
    """Create and save a key for `agent`; the plaintext is returned once and never stored."""
    plaintext, prefix, digest = generate_key()
    key = ApiKey.objects.create(
        agent=agent, prefix=prefix, key_hash=digest, label=label, expires_at=expires_at, note=note
    )
    return key, plaintext


def revoke_keys(keys: QuerySet[ApiKey]) -> int:
    """Revoke the active keys among `keys`; returns how many. One save per key, so the
    reload signal fires and every serving process's snapshot drops them."""
    count = 0
    for key in keys.filter(revoked=False):
        key.revoked = True
        key.save(update_fields=["revoked"])
        count += 1
    return count
