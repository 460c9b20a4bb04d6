"""The last good configuration on local disk, so a restart during a database outage still serves.

Every snapshot built from the database also writes what it was built from (the
validated document, the key rows: hashes and prefixes, never keys, and the
version) to SWITCHBOARD_USAGE_SPOOL_DIR/last-good-config.json, atomically (tmp +
fsync + rename). Environment values are not stored: they are read again at boot.
A process that cannot reach the database at boot validates and serves that file
(routing.config.live.boot) until the database answers. See
docs/usage-records.md#boot-without-the-database.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from routing.config.secrets import stored_keys_from_json, stored_keys_to_json

log = logging.getLogger("switchboard.config")

FILE_NAME = "last-good-config.json"


def path() -> Path:
    from django.conf import settings

    return Path(settings.SWITCHBOARD_USAGE_SPOOL_DIR) / FILE_NAME


def save(
    document: Mapping[str, Any],
    key_rows: list[Mapping[str, Any]],
    version: int,
    stored_keys: Mapping[tuple[str, ...], str] | None = None,
    config_version: int = 0,
) -> None:
    """Write the file atomically; a disk failure is logged, never raised (serving goes on)."""
    target = path()
    tmp = target.with_name(f"{FILE_NAME}.{os.getpid()}.tmp")
    payload = {
        "version": version,
        "config_version": config_version,
        "document": document,
        "key_rows": key_rows,
        "stored_keys": stored_keys_to_json(stored_keys or {}),  # ciphertexts, as the database holds them
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # key hashes, ciphertexts: owner only
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(payload, default=str))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except (OSError, TypeError) as exc:
        log.warning("cannot write the last good configuration to %s (%s)", target, exc)
        try:
            tmp.unlink()
        except OSError:
            pass


def load() -> tuple[dict[str, Any], list[dict[str, Any]], int, dict[tuple[str, ...], str], int] | None:
    """(document, key_rows, version, stored keys, configuration version) of the file, or None when there is
    none or it is unreadable."""
    target = path()
    try:
        payload = orjson.loads(target.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.error("the last good configuration %s is unreadable (%s)", target, exc)
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("document"), dict):
        return None
    return (
        payload["document"],
        list(payload.get("key_rows") or []),
        int(payload.get("version") or 0),
        stored_keys_from_json(payload.get("stored_keys")),
        int(payload.get("config_version") or 0),
    )
