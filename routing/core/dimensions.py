"""The rate-limit dimensions: one row per per-minute limit an org, agent or key may set.

An org's, agent's or key's `limits` mapping (docs/limits.md) holds one value per row,
and the snapshot turns it into a `Limits` tuple in the order of `LIMIT_DIMENSIONS`.
Validation, the snapshot, the limiter (routing.core.limiter), the admin fields, the
dashboard, the metrics and the error catalogue all read this table, so a new limit
that a request pays by count or by tokens is one row here (plus its docs).

Budgets (`usd`, `period`) are spend over a calendar period, not a per-minute bucket,
and keep their own accounting (routing.core.budget_accounts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Dimension:
    """One per-minute limit: its document key, what it counts, and how a request pays it."""

    key: str  # the key in a `limits` mapping and the `limit` label of metrics: "rpm"
    name: str  # what a bucket counts, plural: "requests"; also the x-ratelimit-*-<name> headers
    per_token: bool  # False: a request takes 1; True: its token estimate, corrected once usage is known
    headers: tuple[bytes, bytes, bytes]  # x-ratelimit-limit/remaining/reset-<name>

    @property
    def unit(self) -> str:
        return f"{self.name} per minute"


def _dimension(key: str, name: str, per_token: bool) -> Dimension:
    headers = tuple(f"x-ratelimit-{part}-{name}".encode() for part in ("limit", "remaining", "reset"))
    return Dimension(key, name, per_token, headers)  # type: ignore[arg-type]


LIMIT_DIMENSIONS: tuple[Dimension, ...] = (
    _dimension("rpm", "requests", per_token=False),
    _dimension("tpm", "tokens", per_token=True),
)
LIMIT_KEYS: tuple[str, ...] = tuple(d.key for d in LIMIT_DIMENSIONS)
BY_NAME: dict[str, Dimension] = {d.name: d for d in LIMIT_DIMENSIONS}

# One value per row of LIMIT_DIMENSIONS, in its order; None: no limit on that dimension.
Limits = tuple[int | None, ...]


def limits_of(raw: Mapping[str, Any] | None) -> Limits | None:
    """The `Limits` of a `limits` mapping, or None when it sets none (the request path then pays nothing)."""
    if not raw:
        return None
    values = tuple(raw.get(key) for key in LIMIT_KEYS)
    return None if all(v is None for v in values) else values


def describe() -> str:
    """ "rpm = requests per minute, tpm = tokens per minute": the allowed keys, for error messages."""
    return ", ".join(f"{d.key} = {d.unit}" for d in LIMIT_DIMENSIONS)
