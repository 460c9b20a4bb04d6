"""API keys: generated once, shown once, stored as a hash (docs/api.md#authentication).

Keys carry 240 random bits, so a plain SHA-256 is the right hash: salting and
slow hashing (bcrypt, argon2) protect low-entropy passwords against guessing,
which is hopeless here anyway, and an unsalted digest lets the request path find
a key with one dictionary lookup instead of a scan.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from policies.models import Agent, ApiKey
from routing.config.validation import validate_key_controls

KEY_PREFIX = "sb-"
PREFIX_LENGTH = 10


def hash_key(plaintext: str) -> str:
    """SHA-256 hex of the key, as stored in ApiKey.key_hash and looked up per request."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def generate_key() -> tuple[str, str, str]:
    """A new key as (plaintext, display prefix, sha256 hex); `sb-` + 40 urlsafe characters."""
    plaintext = KEY_PREFIX + secrets.token_urlsafe(30)
    return plaintext, plaintext[:PREFIX_LENGTH], hash_key(plaintext)


# What a key's owner may set besides its agent (docs/limits.md#keys); `models` is stored as allowed_models.
CONTROLS = ("name", "expires_at", "enabled", "limits", "budget", "models", "metadata", "note", "priority")
_FIELD = {"name": "label", "models": "allowed_models"}


class KeyProblems(ValueError):
    """The key's controls are invalid; `problems` are (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = problems


def check_controls(controls: dict[str, Any]) -> None:
    """The one validation of a key's controls (the admin's form and the management API), or KeyProblems."""

    problems = [(e.path, e.message) for e in validate_key_controls(controls)]
    metadata = controls.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        problems.append(("metadata", "metadata must be a JSON object (free-form key: value pairs)"))
    name = controls.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 100):
        problems.append(("name", "name must be a string of at most 100 characters"))
    if "enabled" in controls and not isinstance(controls["enabled"], bool):
        problems.append(("enabled", "enabled must be true or false"))
    if problems:
        raise KeyProblems(problems)


@transaction.atomic
def create_api_key(
    *, agent: Agent, label: str = "", expires_at: datetime | None = None, note: str = "", **controls: Any
) -> tuple[ApiKey, str]:
    """Create and save a key for `agent`; the plaintext is returned once and never stored.

    `controls` are the key's own limits, budget, models, enabled and metadata (docs/limits.md#keys).
    """
    check_controls(controls)
    plaintext, prefix, digest = generate_key()
    key = ApiKey(agent=agent, prefix=prefix, key_hash=digest, label=label, expires_at=expires_at, note=note)
    for name, value in controls.items():
        if value is None and name in ("metadata", "priority"):
            value = {} if name == "metadata" else ""
        setattr(key, _FIELD.get(name, name), value)
    key.save()
    return key, plaintext


def update_key(key: ApiKey, changes: dict[str, Any]) -> ApiKey:
    """Apply `changes` (a subset of CONTROLS) after the one validation; one save, so every process's
    snapshot follows within the reload bound."""
    unknown = sorted(set(changes) - set(CONTROLS))
    if unknown:
        raise KeyProblems([(name, f"unknown field {name!r}: allowed are {', '.join(CONTROLS)}") for name in unknown])
    check_controls(changes)
    for name, value in changes.items():
        if name in ("name", "note", "priority") and value is None:
            value = ""
        if name == "metadata" and value is None:
            value = {}
        setattr(key, _FIELD.get(name, name), value)
    key.save()
    return key


@transaction.atomic
def rotate_key(key: ApiKey, grace_s: float, now: datetime | None = None) -> str:
    """A new secret for `key`; the current one stays valid `grace_s` seconds more (0: not at all).

    The new secret keeps the key's prefix: the prefix is the key's identity for its limits, budget
    and usage records, so rotating neither resets its budget nor splits its analytics.
    """
    from django.utils import timezone

    plaintext = key.prefix + secrets.token_urlsafe(30)
    key.previous_hash = key.key_hash if grace_s > 0 else ""
    key.previous_expires_at = (now or timezone.now()) + timedelta(seconds=grace_s) if grace_s > 0 else None
    key.key_hash = hash_key(plaintext)
    key.save()
    return plaintext


def revoke_keys(keys: QuerySet[ApiKey]) -> int:
    """Revoke the active keys among `keys`; returns how many. One save per key, so the
    reload signal fires and every serving process's snapshot drops them."""
    count = 0
    for key in keys.filter(revoked=False):
        key.revoked = True
        key.save(update_fields=["revoked"])
        count += 1
    return count
