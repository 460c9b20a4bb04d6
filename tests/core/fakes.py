"""Simulated time and small factories for the resilience tests."""

from __future__ import annotations

from routing.config.snapshot import ModelSpec, ProviderSpec, Resilience, Timeouts
from routing.core.executor import Link


class FakeClock:
    """A monotonic clock that only moves when told to (or when `sleep` is awaited)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def provider(name: str = "local-a") -> ProviderSpec:
    return ProviderSpec(
        name=name,
        dialect="openai",
        base_url=f"http://127.0.0.1:9001/{name}",
        api_key=None,
        api_key_env=None,
        connect_timeout_ms=None,
        first_token_timeout_ms=None,
        total_timeout_ms=None,
        health_check_path="",
        health_probe=False,
    )


def model(model_id: str, fallback_on: frozenset[str] | None = None, provider_name: str | None = None) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        provider=provider(provider_name or f"p-{model_id}"),
        upstream_model=f"up-{model_id}",
        capabilities=frozenset({"chat", "streaming"}),
        context_window=8000,
        max_output_tokens=None,
        residency="",
        input_price_per_mtok=None,
        output_price_per_mtok=None,
        fallbacks=(),
        timeouts=Timeouts(connect_ms=5000, first_token_ms=30000, stream_idle_ms=60000, total_ms=600000),
        fallback_on=fallback_on if fallback_on is not None else Resilience().fallback_on,
    )


def link(model_id: str, skip_reason: str | None = None, fallback_on: frozenset[str] | None = None) -> Link:
    m = model(model_id, fallback_on)
    return Link(
        model=m,
        breaker_key=(m.provider.name, m.id),
        base_url=m.provider.base_url,
        api_key=None,
        skip_reason=skip_reason,
    )
