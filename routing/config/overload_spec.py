"""Overload control as the configuration document sets it (docs/overload.md#configuration).

`build_overload(document, key_rows)` reads the overload keys of an already valid document
(routing.config.validation) into one frozen value the snapshot carries: each model's
adaptive-limit and hedging settings, the priority classes of keys, agents and orgs, the
orgs' fair-share weights and the agents whose calls are never hedged. Pure; None when
nothing is configured, so the request path of a gateway without overload control pays
one test (its process's `overload.on`, routing.runtime.overload.Overload).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from routing.core.admission_queue import PRIORITIES
from routing.core.concurrency import LimitSettings
from routing.core.hedging import HedgeSettings

# document key of `concurrency` -> LimitSettings field
_LIMIT_FIELDS = {"initial": "initial", "min": "min_limit", "max": "max_limit", "queue": "queue"}


@dataclass(frozen=True, slots=True)
class OverloadSpec:
    """What the gates, the queue's ordering and hedging need, precomputed per name."""

    limits: Mapping[str, LimitSettings]  # model id -> its deployments' limit settings
    hedge: Mapping[str, HedgeSettings]  # model id -> its hedging settings
    key_classes: Mapping[str, int]  # key prefix -> class rank (the most specific)
    agent_classes: Mapping[tuple[str, str], int]  # (org, agent) -> class rank
    org_classes: Mapping[str, int]  # org -> class rank of its agents that set none
    weights: Mapping[str, float]  # org -> fair-share weight (1 when absent)
    never_hedge: frozenset[tuple[str, str]]  # (org, agent) marked side_effects

    @property
    def gated(self) -> bool:
        return bool(self.limits or self.hedge)


def _limit(raw: Mapping[str, Any]) -> LimitSettings:
    return LimitSettings(**{_LIMIT_FIELDS[k]: int(v) for k, v in raw.items()})


def _hedge(raw: Mapping[str, Any]) -> HedgeSettings:
    return HedgeSettings(float(raw.get("budget_pct", 5.0)), bool(raw.get("tools", False)))


def build_overload(document: Mapping[str, Any], key_rows: list[Mapping[str, Any]] = ()) -> OverloadSpec | None:  # type: ignore[assignment]
    """The overload settings of a valid document; None when none of its keys is set."""
    limits: dict[str, LimitSettings] = {}
    hedge: dict[str, HedgeSettings] = {}
    for m in document.get("models") or ():
        if m.get("concurrency") is not None:
            limits[m["id"]] = _limit(m["concurrency"])
        if m.get("hedge") is not None:
            hedge[m["id"]] = _hedge(m["hedge"])
    agent_classes: dict[tuple[str, str], int] = {}
    org_classes: dict[str, int] = {}
    weights: dict[str, float] = {}
    never: set[tuple[str, str]] = set()
    for o in document.get("orgs") or ():
        org = o["name"]
        if o.get("priority"):
            org_classes[org] = PRIORITIES[o["priority"]]
        if o.get("weight") is not None:
            weights[org] = float(o["weight"])
        for a in o.get("agents") or ():
            if a.get("priority"):
                agent_classes[(org, a["name"])] = PRIORITIES[a["priority"]]
            if a.get("side_effects") is True:
                never.add((org, a["name"]))
    key_classes = {row["prefix"]: PRIORITIES[row["priority"]] for row in key_rows if row.get("priority") in PRIORITIES}
    if not (limits or hedge or agent_classes or org_classes or weights or never or key_classes):
        return None
    return OverloadSpec(limits, hedge, key_classes, agent_classes, org_classes, weights, frozenset(never))
