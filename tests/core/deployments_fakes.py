"""Links of a model with several deployments, for the balancing tests (docs/deployments.md)."""

from __future__ import annotations

from dataclasses import replace

from routing.core.breaker import BreakerKey
from routing.core.executor import Link
from routing.core.picking import Target
from tests.core.fakes import model, provider


def multi(
    model_id: str,
    providers: tuple[str, ...],
    weights: tuple[int, ...] | None = None,
    routing: str = "weighted",
    rpm: dict[str, int] | None = None,
    tpm: dict[str, int] | None = None,
    fallback_on: frozenset[str] | None = None,
) -> Link:
    """One chain link for `model_id` served by a deployment on each of `providers`."""
    base = model(model_id, fallback_on)
    targets = []
    for i, name in enumerate(providers):
        p = provider(name)
        view = replace(base, provider=p, upstream_model=f"up-{model_id}")
        lk = Link(view, BreakerKey(name, model_id), p.base_url, None)
        weight = weights[i] if weights else 1
        targets.append(Target(lk, weight, (rpm or {}).get(name), (tpm or {}).get(name)))
    first = targets[0].link
    return Link(base, first.breaker_key, first.base_url, None, None, tuple(targets), routing)
