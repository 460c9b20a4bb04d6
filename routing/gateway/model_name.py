"""The answer's `model` is the id the client asked for, on every endpoint (docs/api.md#model-in-answers).

Upstreams answer with their own model name (the link's `upstream_model`), which a client
compares with what it sent: Claude Code drops its thinking blocks from the history when the
two differ, and SDKs log and cache by it. The gateway names the upstream model in the
`x-switchboard-upstream-model` header instead, and rewrites the `"model": "<upstream name>"`
members of the answer's bytes to the requested id. Everything else of the bytes is untouched,
so a passthrough answer or stream stays the upstream's, "the model name aside".

The rewrite is a bytes search for the upstream name (C speed; nothing to do when it is absent,
or when the names are the same) and a regex substitution only on the frames that carry it. Only
a JSON object member named `model` whose value is exactly the upstream name is rewritten: the
same text inside a string (a tool argument, escaped as `\\"model\\"`) never matches.
"""

from __future__ import annotations

import re
from functools import lru_cache

import orjson


@lru_cache(maxsize=512)
def _pattern(upstream: str) -> tuple[bytes, re.Pattern[bytes]]:
    value = orjson.dumps(upstream)  # the name as JSON encodes it, quotes included
    return value, re.compile(rb'("model"\s*:\s*)' + re.escape(value))


class Renamer:
    """Rewrites `"model": "<upstream>"` to `"model": "<requested>"` in JSON (or SSE) bytes.

    `feed` is for a stream: it holds back the bytes after the last line end of a chunk, so a
    member cut across two chunks is still rewritten (the bytes are re-chunked, never changed
    otherwise); `flush` gives back what is held at the end.
    """

    __slots__ = ("_needle", "_pattern", "_value", "_held")

    def __init__(self, upstream: str, requested: str) -> None:
        self._needle, self._pattern = _pattern(upstream)
        self._value = orjson.dumps(requested)
        self._held = b""

    def __call__(self, data: bytes) -> bytes:
        if self._needle not in data:
            return data
        value = self._value
        return self._pattern.sub(lambda m: m.group(1) + value, data)

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk if self._held else chunk
        end = data.rfind(b"\n") + 1
        self._held = data[end:]
        return self(data[:end]) if end else b""

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return self(held)


_MODEL_KEY = re.compile(rb'"model"\s*:')
_STRING = re.compile(rb'\s*("[^"\\]*(?:\\.[^"\\]*)*")')


# Every byte but quotes and brackets, deleted (bytes.translate) before the brackets are counted.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"{}[]')
_QUOTED = re.compile(rb'"[^"]*"')
_MAX_CANDIDATES = 8


def _depth(segment: bytes) -> int:
    """How many objects and arrays `segment` (bytes between two places outside any string) opens: escaped
    backslashes and quotes out, then everything but quotes and brackets, then the (now short) strings,
    then count. Each step is a C-speed pass over the bytes, no Python loop over them."""
    bare = segment.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    bare = _QUOTED.sub(b"", bare)
    return bare.count(b"{") - bare.count(b"}") + bare.count(b"[") - bare.count(b"]")


def with_model(raw: bytes, upstream: str) -> bytes | None:
    """The client's body bytes with its top-level `model` string replaced by `upstream`, every other byte
    as sent: a passthrough link gets the client's own request. Call it only for a body whose top-level
    `model` is a string. None when that cannot be done safely: the caller encodes the body itself.

    A `"model":` member inside a string is escaped (`\\"model\\":`) and never matches; one in a nested
    object (a tool's schema, a tool call's input) is told from the top-level one by its depth, counted
    once over the bytes up to the top-level one (each candidate adds only the bytes since the last).
    """
    depth, start = 0, 0
    for n, key in enumerate(_MODEL_KEY.finditer(raw)):
        if n >= _MAX_CANDIDATES:
            return None
        depth += _depth(raw[start : key.start()])
        start = key.start()
        if depth == 1:
            value = _STRING.match(raw, key.end())
            if value is None:
                return None
            return raw[: value.start(1)] + orjson.dumps(upstream) + raw[value.end(1) :]
    return None


def renamer(requested: str, upstream: str) -> Renamer | None:
    """The rewrite of answers from `upstream` for a client that asked for `requested`; None when there
    is nothing to rewrite (the same name, or no name asked for)."""
    if not requested or requested == upstream:
        return None
    return Renamer(upstream, requested)


def renamed(data: bytes, requested: str, upstream: str) -> bytes:
    """A whole answer's bytes renamed as `renamer(requested, upstream)` would rename them, in one call and
    no object: a non-streamed answer is renamed once, with nothing held for a next chunk."""
    if not requested or requested == upstream:
        return data
    needle, pattern = _pattern(upstream)
    if needle not in data:
        return data
    value = orjson.dumps(requested)
    return pattern.sub(lambda m: m.group(1) + value, data)


__all__ = ["Renamer", "renamed", "renamer", "with_model"]
