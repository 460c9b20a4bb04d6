"""The resilience settings the executor runs with, as plain frozen values.

The configuration layer fills them from the operator's document (see
docs/resilience.md); the core only reads them, so it never depends on how
configuration is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

# Every failure that may move a request to the next link, in the order the admin lists them.
FALLBACK_TRIGGERS: tuple[str, ...] = (
    "provider_error",
    "rate_limited",
    "timeout",
    "circuit_open",
    "context_length",
    "content_filter",
)


@dataclass(frozen=True, slots=True)
class Resilience:
    """The global resilience settings; these defaults are the configuration's (routing.config.schema)."""

    max_retries: int = 2
    backoff_base_ms: int = 100
    backoff_max_ms: int = 5000
    connect_timeout_ms: int = 5000
    first_token_timeout_ms: int = 30000
    stream_idle_timeout_ms: int = 60000
    total_timeout_ms: int = 600000
    breaker_failure_threshold: int = 5
    breaker_cooldown_s: float = 30.0
    fallback_max_depth: int = 8
    fallback_on: frozenset[str] = frozenset({"provider_error", "rate_limited", "timeout", "circuit_open"})
    retry_budget_ratio: float = 0.2
    retry_budget_min_per_s: float = 10.0
    # How long a link out of quota or credit is skipped when its provider gives no reset time (docs/errors.md#upstream).
    quota_park_s: float = 3600.0


# The circuit breaker's settings, by their prefix: routing.core.breaker takes them on each configuration
# swap (`BreakerRegistry.configure`), and the admin shows them together.
BREAKER_SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(Resilience) if f.name.startswith("breaker_"))


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Effective per-phase timeouts of a link (model beats provider beats global)."""

    connect_ms: int
    first_token_ms: int
    stream_idle_ms: int
    total_ms: int


class LinkModel(Protocol):
    """What the executor needs to know about the model behind a link."""

    id: str
    fallback_on: frozenset[str]
    timeouts: Timeouts
    affinity_s: float  # docs/deployments.md#affinity; 0: off
