"""The `alerts:` section (docs/alerts.md): a unique name, one destination, known events, percentages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.config.alert_spec import secret_env_problem
from routing.config.schema import ALERT, ALERT_DESTINATIONS, ALERT_EVENTS
from routing.config.validation_rules.errors import URL, VALUE, is_int
from routing.config.validation_rules.problems import ENV_NAME, base_url_problem, env_name_problem
from routing.config.validation_rules.report import Report


class AlertRules(Report):
    """The alerts section."""

    def alerts(self, doc: Mapping[str, Any]) -> None:
        """`alerts:` (docs/alerts.md): a unique name, exactly one destination, known events, percentages."""
        seen: dict[str, str] = {}
        for i, a in self.items(doc, "alerts", "alerts", "alert"):
            path = f"alerts[{self.label(a, 'name', i)}]"
            what = f"alert {a.get('name', i)!r}"
            self.fields(a, path, what, ALERT.names, ALERT.required)
            self.name(a, "name", path, "alert", seen)
            kinds = [k for k in ALERT_DESTINATIONS if a.get(k) is not None]
            if len(kinds) != 1:
                self.add(path, f"{what} must have exactly one destination (webhook, slack or email), has {len(kinds)}")
            for kind in kinds:
                self.alert_destination(a[kind], f"{path}.{kind}", what, kind)
            events = a.get("events", [])
            if not isinstance(events, list) or any(e not in ALERT_EVENTS for e in events):
                self.add(f"{path}.events", f"events of {what} must be a list of {' | '.join(ALERT_EVENTS)}", VALUE)
            percents = a.get("budget_percent", [])
            if not isinstance(percents, list) or not all(is_int(p) and 0 < p <= 1000 for p in percents):
                self.add(
                    f"{path}.budget_percent",
                    f"budget_percent of {what} must be a list of whole percentages from 1 to 1000, e.g. [80, 100]",
                    VALUE,
                )

    def alert_destination(self, dest: Any, path: str, what: str, kind: str) -> None:
        """A webhook or slack `{url}` (a webhook may add `secret_env`, as api_key_env), or an email `{to: [...]}`."""
        allowed = ALERT_DESTINATIONS[kind]
        if not self.mapping(dest, path, f"{kind} of {what}"):
            return
        for key in dest:
            if key not in allowed:
                self.add(
                    f"{path}.{key}", f"unknown {kind} key {key!r} of {what}: remove it (allowed: {', '.join(allowed)})"
                )
        if kind == "email":
            to = dest.get("to")
            if not isinstance(to, list) or not to or not all(isinstance(t, str) and "@" in t for t in to):
                self.add(f"{path}.to", f"to of {what} must be a list of e-mail addresses, e.g. [ops@example.com]")
            return
        self.check(f"{path}.url", base_url_problem(dest.get("url")), URL, f"url of {what}: ")
        name = dest.get("secret_env")
        if name:  # the api_key_env name rule, and the variables an alert may read (routing.config.alert_spec)
            problem = env_name_problem(name) if not isinstance(name, str) or not ENV_NAME.match(name) else None
            self.check(f"{path}.secret_env", problem or secret_env_problem(name), VALUE, f"secret_env of {what}: ")

    # sections ----------------------------------------------------------------------
