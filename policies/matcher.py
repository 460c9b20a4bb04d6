"""Go `filepath.Match` semantics, compiled once to a regex.

`*` matches any run of characters except `/`, `?` one character except `/`,
`[...]` a class (ranges `a-z`, negation `^`, escapes `\\c`), `\\c` the literal c.
Python's `fnmatch` lets `*` cross `/`, which would make `*` match `openai/gpt-4`,
so it is not used. Like Go, a character class may match `/`.
"""

from __future__ import annotations

import re
from functools import lru_cache


class BadPattern(ValueError):
    """The pattern is malformed (Go's ErrBadPattern); the message says where."""


def _escape_char(chunk: str, i: int, pattern: str) -> tuple[str, int]:
    """One (possibly escaped) character of a class, as Go's getEsc."""
    if i >= len(chunk):
        raise BadPattern(f"unterminated character class in {pattern!r}: add the closing ']'")
    c = chunk[i]
    if c in "-]":
        raise BadPattern(f"unexpected {c!r} in character class of {pattern!r}: escape it as '\\{c}'")
    if c == "\\":
        i += 1
        if i >= len(chunk):
            raise BadPattern(f"trailing backslash in character class of {pattern!r}")
        c = chunk[i]
    i += 1
    if i >= len(chunk):
        raise BadPattern(f"unterminated character class in {pattern!r}: add the closing ']'")
    return c, i


def _class(pattern: str, i: int) -> tuple[str, int]:
    """Translate the class starting after '[' at index i; return (regex, next index)."""
    negated = False
    if i < len(pattern) and pattern[i] == "^":
        negated = True
        i += 1
    ranges: list[tuple[str, str]] = []
    while True:
        if i < len(pattern) and pattern[i] == "]" and ranges:
            i += 1
            break
        lo, i = _escape_char(pattern, i, pattern)
        hi = lo
        if pattern[i] == "-":
            hi, i = _escape_char(pattern, i + 1, pattern)
        ranges.append((lo, hi))
    valid = [(lo, hi) for lo, hi in ranges if lo <= hi]
    body = "".join(re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in valid)
    if not valid:
        return ("(?s:.)" if negated else "(?!)"), i
    return (f"[^{body}]" if negated else f"[{body}]"), i


def translate(pattern: str) -> str:
    """Return a regex source equivalent to the Go pattern; raise BadPattern if malformed.

    Go matches each star+chunk at its leftmost position and never backtracks into it
    (only the last chunk may float to the end of the name); an atomic lazy group
    `(?>[^/]*?chunk)` reproduces exactly that, so a class that can match '/' after
    a star gives Go's answer.
    """
    pieces: list[tuple[bool, str]] = []  # (preceded by a star, chunk regex)
    star = False
    chunk: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            if chunk:
                pieces.append((star, "".join(chunk)))
                chunk = []
            while i < len(pattern) and pattern[i] == "*":
                i += 1
            star = True
            continue
        if c == "?":
            chunk.append("[^/]")
        elif c == "[":
            regex, i = _class(pattern, i + 1)
            chunk.append(regex)
            continue
        elif c == "\\":
            i += 1
            if i >= len(pattern):
                raise BadPattern(f"trailing backslash in {pattern!r}: escape it as '\\\\'")
            chunk.append(re.escape(pattern[i]))
        else:
            chunk.append(re.escape(c))
        i += 1
    pieces.append((star, "".join(chunk)))
    out = []
    for n, (starred, body) in enumerate(pieces):
        if not starred:
            out.append(body)
        elif n == len(pieces) - 1:
            out.append("[^/]*" + body)
        else:
            out.append(f"(?>[^/]*?{body})")
    return "".join(out)


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a Go filepath.Match pattern; the result's fullmatch() decides a match."""
    return re.compile(translate(pattern), re.DOTALL)


def match(pattern: str, name: str) -> bool:
    """Go's filepath.Match(pattern, name) without the error value (raises BadPattern)."""
    return compile_pattern(pattern).fullmatch(name) is not None


def pattern_error(pattern: str) -> str | None:
    """The reason a pattern is malformed, or None when it is valid."""
    try:
        compile_pattern(pattern)
    except BadPattern as exc:
        return str(exc)
    return None
