"""A configuration problem, the check id of its rule family, and how a message shows a value.

Every rule module of routing.config.validation_rules reports through `ConfigError`; the codes are listed,
with what each family covers, in routing.config.checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STRUCTURE = "routing.E001"
FALLBACK = "routing.E002"
CAPABILITY = "routing.E003"
PATTERN = "routing.E004"
URL = "routing.E005"
VALUE = "routing.E006"
ALIAS = "routing.E007"
REFERENCE = "routing.E008"


@dataclass(frozen=True, slots=True)
class ConfigError:
    """One problem: where (`models[chat-a].fallbacks[1]`) and what to do about it."""

    path: str
    message: str
    code: str = field(default=STRUCTURE, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def is_int(value: Any) -> bool:
    """A whole number; YAML's true/false are bools, which Python counts as ints."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_num(value: Any) -> bool:
    """An int or a float, never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def short_repr(value: Any) -> str:
    """A value as a message quotes it: its repr, cut at 40 characters so a pasted blob stays readable."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kind_of(value: Any) -> str:
    """What a value is, in the words a message uses ("got a list")."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
