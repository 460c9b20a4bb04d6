"""Hedged first tokens (docs/overload.md#hedging): when a deployment's first token is late, ask another.

Per deployment, the recent times to first token (a non-stream: the whole answer) are kept
in a small ring; when a request of a hedged model has waited past their p95, the executor
sends the same request to another deployment of the model and keeps whichever commits
first. Hedges are bounded by a budget per model: at most `budget_pct` % extra calls over a
sliding 10 s window (routing.core.retry_budget's window, with no floor), so a slow
upstream cannot double the load on the others.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from routing.core.retry_budget import RetryBudgets

SAMPLES = 200  # first-token times kept per deployment
MIN_SAMPLES = 20  # below this the p95 is not known: no hedge


@dataclass(frozen=True, slots=True)
class HedgeSettings:
    budget_pct: float = 5.0
    tools: bool = False  # hedge requests that offer tools too (their calls may have side effects)


class _Ring:
    __slots__ = ("values", "p95", "stale")

    def __init__(self) -> None:
        self.values: deque[float] = deque(maxlen=SAMPLES)
        self.p95 = 0.0
        self.stale = 0  # samples since p95 was computed


class Hedges:
    """Every hedged model's settings and budget, and the deployments' first-token times."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.on = False
        self.settings: dict[str, HedgeSettings] = {}
        self._rings: dict[Hashable, _Ring] = {}
        self._budget = RetryBudgets(clock)
        self.on_outcome: Callable[[str], None] | None = None

    def configure(self, settings: Mapping[str, HedgeSettings]) -> None:
        """New settings (a config reload); the first-token figures and budgets stay when nothing changed."""
        if settings == self.settings:
            return
        self.settings = dict(settings)
        self._rings = {}
        self._budget.clear()
        self.on = bool(settings)

    def observe(self, key: Hashable, seconds: float) -> None:
        """One call's time to first token on deployment `key`."""
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = _Ring()
        ring.values.append(seconds)
        ring.stale += 1

    def delay(self, model_id: str, key: Hashable, tools: bool = False) -> float | None:
        """How long to wait before hedging a request of `model_id` on `key`; None: do not hedge.

        Counts the request against the model's hedge budget window. A request that offers
        `tools` is hedged only when the model's settings say its tools have no side effects.
        """
        settings = self.settings.get(model_id)
        if settings is None or (tools and not settings.tools):
            return None
        self._budget.record_request(model_id)
        ring = self._rings.get(key)
        if ring is None or len(ring.values) < MIN_SAMPLES:
            return None
        if ring.stale >= 10 or ring.p95 == 0:  # recomputed every 10 samples: ~200 floats sorted
            ordered = sorted(ring.values)
            ring.p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            ring.stale = 0
        return ring.p95

    def spend(self, model_id: str) -> bool:
        """Take one hedge from the model's budget; False: the budget is spent."""
        ratio = self.settings[model_id].budget_pct / 100.0
        if self._budget.try_spend_retry(model_id, ratio, 0.0):
            return True
        self.note("budget_spent")
        return False

    def note(self, outcome: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
