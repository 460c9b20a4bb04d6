"""A line-by-line Python port of Go's path/filepath.Match (go/src/path/filepath/match.go, Unix).

The reference the matcher is checked against: same chunk scanning, same
leftmost match without backtracking for each star, same errors (raised as Bad).
"""

from __future__ import annotations


class Bad(Exception):
    """Go's ErrBadPattern."""


def scan_chunk(pattern: str) -> tuple[bool, str, str]:
    star = False
    while pattern and pattern[0] == "*":
        pattern = pattern[1:]
        star = True
    in_range = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 < len(pattern):
                i += 1
        elif c == "[":
            in_range = True
        elif c == "]":
            in_range = False
        elif c == "*" and not in_range:
            break
        i += 1
    return star, pattern[:i], pattern[i:]


def get_esc(chunk: str) -> tuple[str, str]:
    if not chunk or chunk[0] in "-]":
        raise Bad
    if chunk[0] == "\\":
        chunk = chunk[1:]
        if not chunk:
            raise Bad
    r, rest = chunk[0], chunk[1:]
    if not rest:
        raise Bad
    return r, rest


def match_chunk(chunk: str, s: str) -> tuple[str, bool]:
    failed = False
    while chunk:
        if not failed and not s:
            failed = True
        c = chunk[0]
        if c == "[":
            r = ""
            if not failed:
                r, s = s[0], s[1:]
            chunk = chunk[1:]
            negated = False
            if chunk and chunk[0] == "^":
                negated = True
                chunk = chunk[1:]
            matched = False
            nrange = 0
            while True:
                if chunk and chunk[0] == "]" and nrange > 0:
                    chunk = chunk[1:]
                    break
                lo, chunk = get_esc(chunk)
                hi = lo
                if chunk[0] == "-":
                    hi, chunk = get_esc(chunk[1:])
                if lo <= r <= hi:
                    matched = True
                nrange += 1
            if matched == negated:
                failed = True
        elif c == "?":
            if not failed:
                if s[0] == "/":
                    failed = True
                s = s[1:]
            chunk = chunk[1:]
        else:
            if c == "\\":
                chunk = chunk[1:]
                if not chunk:
                    raise Bad
            if not failed:
                if chunk[0] != s[0]:
                    failed = True
                s = s[1:]
            chunk = chunk[1:]
    if failed:
        return "", False
    return s, True


def go_match(pattern: str, name: str) -> bool:
    while pattern:
        star, chunk, pattern = scan_chunk(pattern)
        if star and chunk == "":
            return "/" not in name
        t, ok = match_chunk(chunk, name)
        if ok and (len(t) == 0 or len(pattern) > 0):
            name = t
            continue
        found = False
        if star:
            i = 0
            while i < len(name) and name[i] != "/":
                t, ok = match_chunk(chunk, name[i + 1 :])
                if ok:
                    if len(pattern) == 0 and len(t) > 0:
                        i += 1
                        continue
                    name = t
                    found = True
                    break
                i += 1
        if found:
            continue
        while pattern:  # Go validates the rest of the pattern before returning false
            _, chunk, pattern = scan_chunk(pattern)
            match_chunk(chunk, "")
        return False
    return len(name) == 0
