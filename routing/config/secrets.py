"""Where upstream secrets may come from, and how URLs are printed without them.

Configuration names environment variables (`api_key_env`) whose values are sent
upstream as `Authorization: Bearer ...`. Anyone who can edit the configuration
could otherwise name *any* variable (SECRET_KEY, DATABASE_URL) and point
`base_url` at a server of their own. So only variables whose name starts with
SWITCHBOARD_SECRET_ENV_PREFIX (default `SWITCHBOARD_UPSTREAM_`) or that are listed
in SWITCHBOARD_SECRET_ENV_ALLOW may be referenced; validation refuses the rest and
the snapshot builder never reads them (defence in depth).

Keys can also be stored in the database, encrypted with the Fernet key of
SWITCHBOARD_FERNET_KEY; the configuration document then says `api_key: stored`
and never carries the secret. See docs/security.md#secrets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from policies.models import OrgCredential
from providers.models import Provider

log = logging.getLogger("switchboard.config")

DEFAULT_PREFIX = "SWITCHBOARD_UPSTREAM_"
STORED = "stored"  # the document's reference to a key kept encrypted in the database


def _setting(name: str, default: Any) -> Any:
    """A Django setting when settings are configured, else the environment (pure tests, scripts)."""
    from django.conf import settings

    if settings.configured:
        return getattr(settings, name, default)
    return os.environ.get(name, default)


def env_prefix() -> str:
    return str(_setting("SWITCHBOARD_SECRET_ENV_PREFIX", DEFAULT_PREFIX) or "")


def env_allow_list() -> frozenset[str]:
    raw = _setting("SWITCHBOARD_SECRET_ENV_ALLOW", "")
    names = raw.split(",") if isinstance(raw, str) else list(raw or ())
    return frozenset(n.strip() for n in names if n and n.strip())


def env_allowed(name: str) -> bool:
    """True when configuration may reference the environment variable `name` as an upstream key."""
    prefix = env_prefix()
    return bool(name) and ((bool(prefix) and name.startswith(prefix)) or name in env_allow_list())


def env_policy_problem(name: str) -> str | None:
    """Why `name` may not be referenced (None when it may); the message says how to allow it."""
    if env_allowed(name):
        return None
    prefix = env_prefix()
    return (
        f"the environment variable {name!r} may not be sent upstream as a key: rename it to start with "
        f"{prefix!r} (SWITCHBOARD_SECRET_ENV_PREFIX) or add it to SWITCHBOARD_SECRET_ENV_ALLOW (comma-separated)"
    )


def read_env_key(environ: Mapping[str, str], name: str | None) -> str | None:
    """The value of an allowed key variable; a refused name is never read (validation already refused it)."""
    if not name:
        return None
    if not env_allowed(name):
        log.error("refusing to read environment variable %r as an upstream key (not allowed)", name)
        return None
    return environ.get(name)


# --------------------------------------------------------------------------- URLs


def redact_url(url: Any) -> str:
    """The URL without user:password@ and without query string or fragment, for messages and logs."""
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unprintable URL>"
    if not parts.scheme and not parts.netloc:
        return text.split("?", 1)[0].split("#", 1)[0]
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def userinfo_problem(url: Any) -> str | None:
    """A base_url must not embed credentials: they would be logged and shown in errors."""
    if not isinstance(url, str) or "@" not in url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.username is None and parts.password is None:
        return None
    return (
        f"{redact_url(url)!r} carries credentials (user:password@): remove them from the URL and give the key "
        "with api_key_env or store it encrypted in the admin"
    )


# --------------------------------------------------------------------------- stored keys


class StoredKeyError(Exception):
    """No Fernet key is configured, or a stored key cannot be decrypted with it."""


ENABLE_HINT = (
    "set SWITCHBOARD_FERNET_KEY to a Fernet key (generate one with "
    "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`) "
    "and restart, to store upstream keys encrypted in the database"
)


@lru_cache(maxsize=4)
def _fernet_for(key: str) -> Any:
    from cryptography.fernet import Fernet

    try:
        return Fernet(key.encode() if isinstance(key, str) else key)
    except (ValueError, TypeError) as exc:
        raise StoredKeyError(f"SWITCHBOARD_FERNET_KEY is not a valid Fernet key ({exc}): {ENABLE_HINT}") from exc


def fernet_configured() -> bool:
    return bool(_setting("SWITCHBOARD_FERNET_KEY", ""))


def _fernet() -> Any:
    key = _setting("SWITCHBOARD_FERNET_KEY", "")
    if not key:
        raise StoredKeyError(f"no SWITCHBOARD_FERNET_KEY: {ENABLE_HINT}")
    return _fernet_for(key)


def encrypt(secret: str) -> str:
    """The ciphertext to store for `secret` (raises StoredKeyError without a Fernet key)."""
    return _fernet().encrypt(secret.encode()).decode()


def decrypt(token: str | None) -> str | None:
    """The secret of a stored ciphertext; None (logged) when it cannot be decrypted."""
    if not token:
        return None
    from cryptography.fernet import InvalidToken

    try:
        return _fernet().decrypt(token.encode()).decode()
    except (StoredKeyError, InvalidToken) as exc:
        log.error("cannot decrypt a stored upstream key (%s); the request goes without it", exc or "wrong key")
        return None


def resolve_key(
    environ: Mapping[str, str], key_env: str | None, stored: Mapping[Any, str] | None, ref: Any
) -> str | None:
    """An upstream key for the snapshot: the stored (encrypted) one if any, else the allowed env var."""
    token = (stored or {}).get(ref)
    if token:
        return decrypt(token)
    return read_env_key(environ, key_env)


def stored_ref_problem(value: Any) -> str | None:
    """`api_key` in the document may only be the reference `stored`, and needs the Fernet key to be usable."""
    if value != STORED:
        return (
            f"api_key may only be {STORED!r} (a key kept encrypted in the database, entered in the admin); "
            "never write the key itself in the configuration: use api_key_env or the admin"
        )
    if not fernet_configured():
        return f"a stored (encrypted) key needs SWITCHBOARD_FERNET_KEY, the key it was stored with: {ENABLE_HINT}"
    return None


def stored_keys_from_db() -> dict[tuple[str, ...], str]:
    """Ciphertexts of keys stored in the database: ("provider", name) and ("credential", org, provider)."""

    keys: dict[tuple[str, ...], str] = {}
    for name, token in Provider.objects.exclude(api_key_encrypted="").values_list("name", "api_key_encrypted"):
        keys[("provider", name)] = token
    rows = OrgCredential.objects.exclude(api_key_encrypted="").values_list(
        "org__name", "provider__name", "api_key_encrypted"
    )
    for org, provider, token in rows:
        keys[("credential", org, provider)] = token
    return keys


def stored_keys_to_json(keys: Mapping[tuple[str, ...], str]) -> list[list[str]]:
    return [[*ref, token] for ref, token in keys.items()]


def stored_keys_from_json(rows: Any) -> dict[tuple[str, ...], str]:
    return {tuple(row[:-1]): row[-1] for row in rows or [] if isinstance(row, list) and len(row) >= 2}
