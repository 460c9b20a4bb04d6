"""A readable diff of two configuration documents (docs/config-history.md#diff).

Pure: two plain documents (the shape of routing.config.document) in, a list of
changes out. Lists of entries that carry a natural key (providers and orgs by
`name`, models by `id`, an org's credentials by `provider`, …) are compared entry
by entry, so a change reads `~ models[chat-a].total_timeout_ms: 30000 -> 60000`
instead of a reordered blob; other lists (capabilities, fallbacks, policies, whose
order is their meaning) are compared as one value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from routing.config.schema import RESILIENCE_DEFAULTS

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
_SYMBOL = {ADDED: "+", REMOVED: "-", CHANGED: "~"}
# The key an entry of a list is known by, in the order tried (an entry's first present key wins).
NATURAL_KEYS = ("id", "name", "provider")


def _natural_key(items: list[Any]) -> str | None:
    """The key every entry of `items` has, with distinct values (None: compare the list as one value)."""
    if not items or not all(isinstance(item, Mapping) for item in items):
        return None
    for key in NATURAL_KEYS:
        values = [item.get(key) for item in items]
        if all(isinstance(v, str) for v in values) and len(set(values)) == len(values):
            return key
    return None


def _walk(old: Any, new: Any, path: str, out: list[dict[str, Any]]) -> None:
    if old == new:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in list(old) + [k for k in new if k not in old]:
            child = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append({"op": REMOVED, "path": child, "old": old[key]})
            elif key not in old:
                out.append({"op": ADDED, "path": child, "new": new[key]})
            else:
                _walk(old[key], new[key], child, out)
        return
    if isinstance(old, list) and isinstance(new, list):
        old_key, new_key = _natural_key(old), _natural_key(new)
        key = old_key or new_key
        if key is not None and (not old or old_key == key) and (not new or new_key == key):
            before = {item[key]: item for item in old}
            after = {item[key]: item for item in new}
            for name in list(before) + [n for n in after if n not in before]:
                child = f"{path}[{name}]"
                if name not in after:
                    out.append({"op": REMOVED, "path": child, "old": before[name]})
                elif name not in before:
                    out.append({"op": ADDED, "path": child, "new": after[name]})
                else:
                    _walk(before[name], after[name], child, out)
            return
    out.append({"op": CHANGED, "path": path, "old": old, "new": new})


def empty_document() -> dict[str, Any]:
    """The configuration of a fresh database: what the first recorded version is compared with."""
    return {"resilience": dict(RESILIENCE_DEFAULTS), "providers": [], "models": [], "aliases": {}, "orgs": []}


def diff_documents(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The changes that turn document `old` into `new`: `{"op", "path", "old"?, "new"?}`, in document order.

    None stands for the empty configuration (`empty_document`)."""
    out: list[dict[str, Any]] = []
    _walk(
        dict(old) if old is not None else empty_document(), dict(new) if new is not None else empty_document(), "", out
    )
    return out


def short_value(value: Any, limit: int = 160) -> str:
    """A value as compact JSON (strings as they are), cut at `limit` characters."""
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(changes: Iterable[Mapping[str, Any]], limit: int = 160) -> list[str]:
    """One line per change: `+ path: new`, `- path`, `~ path: old -> new` (values cut at `limit`)."""
    lines = []
    for change in changes:
        op, path = change["op"], change["path"]
        if op == ADDED:
            lines.append(f"+ {path}: {short_value(change['new'], limit)}")
        elif op == REMOVED:
            lines.append(f"- {path}")
        else:
            lines.append(f"~ {path}: {short_value(change['old'], limit)} -> {short_value(change['new'], limit)}")
    return lines


def summarise(changes: list[Mapping[str, Any]], shown: int = 3) -> str:
    """A one-line summary: the first few changed paths and how many more."""
    if not changes:
        return "no change to the configuration document"
    parts = [f"{_SYMBOL[c['op']]} {c['path']}" for c in changes[:shown]]
    more = len(changes) - shown
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
