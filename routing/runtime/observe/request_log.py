"""One structured JSON log line per proxied request, on logger "switchboard.requests".

The usage writer emits it from its own thread as it takes records off the request
path, so logging never costs the event loop. Only whitelisted fields are written:
a usage record holds no secrets, and this keeps it that way if one is ever added.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

logger = logging.getLogger("switchboard.requests")

# Usage-record field -> log key. Nothing else reaches the log line.
FIELDS: tuple[tuple[str, str], ...] = (
    ("request_id", "request_id"),
    ("org", "org"),
    ("agent", "agent"),
    ("endpoint", "endpoint"),
    ("requested_model", "model"),
    ("model_used", "model_used"),
    ("provider", "provider"),
    ("attempts", "attempts"),
    ("fallback_reason", "fallback_reason"),
    ("status", "status"),
    ("error_code", "error_code"),
    ("latency_ms", "latency_ms"),
    ("ttft_ms", "ttft_ms"),
    ("streamed", "streamed"),
)


def log_line(record: Mapping[str, Any]) -> bytes:
    """The JSON line for one usage record (whitelisted fields only; None and "" left out).

    Runs for every record on the writer thread (GIL time the event loop waits for):
    the common truthy value takes one test, the rest two.
    """
    get = record.get
    out: dict[str, Any] = {"event": "request"}
    for field, key in FIELDS:
        value = get(field)
        if value:
            out[key] = round(value, 3) if isinstance(value, float) else value
        elif value is not None and value != "":  # 0, 0.0, False are logged
            out[key] = value
    return orjson.dumps(out, default=str)


def log_requests(records: list[Mapping[str, Any]]) -> None:
    """One JSON line per request, handed to logging in one call per batch (cheaper for the writer thread)."""
    if records and logger.isEnabledFor(logging.INFO):
        logger.info(b"\n".join([log_line(r) for r in records]).decode())
