"""The character set and length bounds of identifiers and free text (docs/security.md#identifiers).

A model id, alias, pattern or path is copied into upstream requests, log lines,
metrics labels and every operator page. A newline in one splits a log line or an
upstream request; a zero-width or right-to-left character, or a Cyrillic letter
among Latin ones, makes a different id look exactly like a real one. So the one
validation (routing.config.validation) runs every such value through here:

- identifiers (`identifier_problem`): at most MAX_ID characters (patterns
  MAX_PATTERN), no control characters (tab, CR and LF included), no invisible
  formatting characters (zero-width, bidirectional overrides and isolates, BOM),
  in Unicode NFKC form (the message shows the normalised spelling to use), and
  Latin, Greek and Cyrillic letters never mixed in one value;
- free text (`text_problem`: a breaker reason): at most MAX_REASON characters, no
  control or invisible formatting characters; any script, not normalised.

ASCII values, nearly all of them, take one regular-expression search.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

MAX_ID = 128  # model ids, aliases, upstream model names, org/agent/provider names
MAX_PATTERN = 256  # one model pattern of a policy or an API key
MAX_KEY_PATTERNS = 64  # model patterns of one API key
MAX_POLICIES = 1000  # policies of one org
MAX_REASON = 500  # free text: a breaker control's reason (its database column holds 500)
MAX_PATH = 512  # a provider's health_check_path

_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")
_CONFUSABLE_SCRIPTS = frozenset({"LATIN", "GREEK", "CYRILLIC"})


def _codepoint(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def _character_problem(value: str) -> str | None:
    """A control or invisible formatting character in `value`, described with its position."""
    if value.isascii():
        match = _ASCII_CONTROL.search(value)
        if match is None:
            return None
        index, char = match.start(), match.group()
    else:
        found = next(
            ((i, c) for i, c in enumerate(value) if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn")), None
        )
        if found is None:
            return None
        index, char = found
    kind = "control" if unicodedata.category(char) == "Cc" else "invisible or direction-changing"
    return f"contains the {kind} character {_codepoint(char)} at position {index + 1}: remove it"


def _scripts(value: str) -> list[str]:
    """The look-alike scripts (Latin, Greek, Cyrillic) whose letters `value` uses, in order of appearance."""
    seen: list[str] = []
    for char in value:
        if char.isalpha():
            script = unicodedata.name(char, "").split(" ", 1)[0]
            if script in _CONFUSABLE_SCRIPTS and script not in seen:
                seen.append(script)
    return seen


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def identifier_problem(value: Any, what: str, limit: int = MAX_ID) -> str | None:
    """Why `value` is not a usable identifier (None when it is, or is no string: other rules say so)."""
    if not isinstance(value, str):
        return None
    if len(value) > limit:
        return f"{what} is {len(value)} characters long: at most {limit} are allowed, shorten it"
    if _PRINTABLE_ASCII.fullmatch(value):  # nearly every id: one C-level match
        return None
    problem = _character_problem(value)
    if problem is not None:
        return f"{what} {_shown(value)} {problem}"
    if value.isascii():
        return None
    normal = unicodedata.normalize("NFKC", value)
    if normal != value:
        return f"{what} {_shown(value)} is not in Unicode NFKC form: write it as {normal!r}"
    scripts = _scripts(value)
    if len(scripts) > 1:
        names = " and ".join(s.title() for s in scripts)
        return f"{what} {_shown(value)} mixes {names} letters, which look alike: spell it in one script"
    return None


def text_problem(value: Any, what: str, limit: int = MAX_REASON) -> str | None:
    """Why free text `value` (a reason) cannot be kept (None when it can, or is no string)."""
    if not isinstance(value, str):
        return None
    if len(value) > limit:
        return f"{what} is {len(value)} characters long: at most {limit} are allowed, shorten it"
    problem = _character_problem(value)
    return None if problem is None else f"{what} {problem}"


def path_problem(value: Any) -> str | None:
    """Why `value` is not a URL path such as /models (None when it is, or is empty: the dialect's default)."""
    if value == "":
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        return (
            f"{_shown(value) if isinstance(value, str) else repr(value)} must be a path starting with '/', e.g. /models"
        )
    if len(value) > MAX_PATH:
        return f"is {len(value)} characters long: a path has at most {MAX_PATH}, shorten it"
    if not value.isascii() or any(c.isspace() for c in value) or _ASCII_CONTROL.search(value):
        return (
            f"{_shown(value)} must be a path of printable ASCII characters without spaces "
            "(percent-encode anything else, e.g. %20), e.g. /models"
        )
    return None
