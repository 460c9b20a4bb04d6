"""Alert rules as the configuration document sets them (docs/alerts.md).

`build_alerts(document, environ)` reads the `alerts:` list of an already valid document
(routing.config.validation) into frozen rules the snapshot carries: each rule's one
destination, the events it wants and its budget thresholds. A webhook's signing secret is
read here from its `secret_env` variable, under the same allow rule as an upstream key
(routing.config.secrets), and never leaves the rule (not in repr, not in any payload).
Pure; an empty tuple when nothing is configured, so the parts that report events pay one
test (routing.runtime.observe.alerts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.config.schema import ALERT_DESTINATIONS
from routing.config.secrets import env_allowed, env_policy_problem

# A webhook's signing secret: a variable named with this prefix, or one an upstream key could name
# (SWITCHBOARD_SECRET_ENV_PREFIX / SWITCHBOARD_SECRET_ENV_ALLOW, docs/security.md#secrets). Any other
# variable (SECRET_KEY, DATABASE_URL) is refused by validation and never read.
ALERT_ENV_PREFIX = "SWITCHBOARD_ALERT_"


def secret_env_allowed(name: str) -> bool:
    return name.startswith(ALERT_ENV_PREFIX) or env_allowed(name)


def secret_env_problem(name: str) -> str | None:
    """Why a webhook's `secret_env` may not be read (None when it may); says how to allow it."""
    if secret_env_allowed(name):
        return None
    upstream = env_policy_problem(name) or ""
    return f"name it {ALERT_ENV_PREFIX}... instead, or {upstream.split(': ', 1)[-1]}"


@dataclass(frozen=True, slots=True)
class AlertSpec:
    """One alert rule: where it goes (`kind` webhook | slack | email), what it wants."""

    name: str
    kind: str
    url: str = ""  # webhook and slack
    to: tuple[str, ...] = ()  # email
    events: frozenset[str] = frozenset()
    budget_percent: tuple[int, ...] = ()  # thresholds for every org, agent and key with a budget
    secret_env: str = ""  # the variable's name (shown in the admin); the value is `secret`
    secret: str | None = field(default=None, repr=False, compare=False)

    @property
    def destination(self) -> str:
        """The destination as the admin shows it: never a secret, never a URL's query string."""
        if self.kind == "email":
            return "email:" + ",".join(self.to)
        return f"{self.kind}:{self.url.split('?', 1)[0]}"

    def wants(self, event: str) -> bool:
        return event in self.events or (event == "budget" and bool(self.budget_percent))


def alert_from_item(item: Mapping[str, Any], environ: Mapping[str, str]) -> AlertSpec:
    """One document entry (valid) as its rule."""
    kind = next(k for k in ALERT_DESTINATIONS if item.get(k) is not None)
    dest = item[kind]
    secret_env = dest.get("secret_env") or ""
    return AlertSpec(
        name=item["name"],
        kind=kind,
        url=dest.get("url") or "",
        to=tuple(dest.get("to") or ()),
        events=frozenset(item.get("events") or ()),
        budget_percent=tuple(sorted({int(p) for p in item.get("budget_percent") or ()})),
        secret_env=secret_env,
        secret=environ.get(secret_env) if secret_env and secret_env_allowed(secret_env) else None,
    )


def build_alerts(document: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[AlertSpec, ...]:
    """Every rule of the document, in document order."""
    return tuple(alert_from_item(item, environ) for item in document.get("alerts") or ())
