"""The error list a validation run fills, and the shape checks every section uses.

`Report` collects `ConfigError`s (never stopping at the first) and checks the shape of
an entry: a mapping, a list of mappings, its allowed and required fields, a string, a
unique slug name. The section rules (routing.config.validation_rules.values, .catalogue,
.orgs, .alerts) build on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.config.validation_rules.errors import STRUCTURE, ConfigError, kind_of
from routing.config.validation_rules.schema_rules import CHECKS

_SETS: dict[tuple[str, ...], frozenset[str]] = {}


class Report:
    """The problems found so far, and the shape checks that add to them."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        self.dialects: dict[str, str] = {}  # provider name -> dialect, for the deployment rule

    def add(self, path: str, message: str, code: str = STRUCTURE) -> None:
        self.errors.append(ConfigError(path, message, code))

    # shape -------------------------------------------------------------------------

    def mapping(self, value: Any, path: str, what: str) -> bool:
        if isinstance(value, Mapping):
            return True
        self.add(path, f"{what} must be a mapping (key: value), got {kind_of(value)}")
        return False

    def items(self, parent: Mapping[str, Any], key: str, path: str, what: str) -> list[tuple[int, dict[str, Any]]]:
        """The mapping entries of an optional list, reporting non-list / non-mapping entries."""
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, f"{key} must be a list of {what} entries, got {kind_of(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            if self.mapping(item, f"{path}[{i}]", f"each {what} entry"):
                out.append((i, item))
        return out

    def fields(
        self, item: Mapping[str, Any], path: str, what: str, allowed: tuple[str, ...], required: tuple[str, ...]
    ) -> None:
        allowed_set = _SETS.get(allowed) or _SETS.setdefault(allowed, frozenset(allowed))
        for key in item:
            if key not in allowed_set:
                self.add(
                    f"{path}.{key}", f"unknown field {key!r} for {what}: remove it (allowed: {', '.join(allowed)})"
                )
        for key in required:
            if item.get(key) in (None, ""):
                self.add(f"{path}.{key}", f"{what} is missing the required field {key!r}: add it")

    def string(self, item: Mapping[str, Any], key: str, path: str, what: str) -> str | None:
        value = item.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.add(f"{path}.{key}", f"{key} of {what} must be a string, got {kind_of(value)}")
            return None
        return value

    def name(self, item: Mapping[str, Any], key: str, path: str, what: str, seen: dict[str, str]) -> str | None:
        """A slug name, unique among `seen`; returns it when usable."""
        value = self.string(item, key, path, what)
        if not value:
            return None
        rule, code = CHECKS["slug"]
        message = rule(value, key, what)
        if message:
            self.add(f"{path}.{key}", message, code)
        if value in seen:
            self.add(f"{path}.{key}", f"duplicate {what} name {value!r}: names must be unique, rename or remove one")
        seen[value] = path
        return value

    def label(self, item: Mapping[str, Any], key: str, index: int) -> str:
        value = item.get(key)
        return value if isinstance(value, str) and value else str(index)

    def check(self, path: str, problem: str | None, code: str, prefix: str = "") -> None:
        if problem:
            self.add(path, prefix + problem, code)
