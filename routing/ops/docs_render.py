"""The docs/*.md pages as HTML (docs/dashboard.md#docs-pages): CommonMark, tables, GitHub's heading anchors.

The pages are the installation's own files (never a path from the request), so their raw HTML is kept:
the `<a id="...">` anchors the docs link to must keep working. Headings get the anchors GitHub gives them,
the ones `foo.md#bar` links between the docs were written against (tests/test_doc_references.py checks
them with the same rule). Links stay relative: a page is served at `/docs/<page>.md`, so `foo.md#bar`
and `analytics.png` resolve to the pages and images beside it without being rewritten.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore


@dataclass(frozen=True)
class RenderedPage:
    """One docs page as HTML: its first `#` heading as plain text (for <title>) and the body."""

    title: str
    html: str


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's source text: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _heading_ids(state: StateCore) -> None:
    """Give every heading its GitHub anchor as `id`; a repeated one gets `-1`, `-2`, ... as GitHub does."""
    seen: dict[str, int] = {}
    tokens = state.tokens
    for i, token in enumerate(tokens):
        if token.type != "heading_open" or i + 1 >= len(tokens):
            continue
        base = slug(tokens[i + 1].content)
        n = seen.get(base, 0)
        seen[base] = n + 1
        token.attrSet("id", base if n == 0 else f"{base}-{n}")


@functools.cache
def _parser() -> MarkdownIt:
    """Built on the first docs page asked for, never at import: the gateway's processes mostly never need it."""
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    md.core.ruler.push("heading_ids", _heading_ids)
    return md


def _title(tokens: list, fallback: str) -> str:
    for i, token in enumerate(tokens[:-1]):
        if token.type == "heading_open" and token.tag == "h1":
            children = tokens[i + 1].children or []
            return "".join(c.content for c in children if c.type in ("text", "code_inline")).strip() or fallback
    return fallback


@functools.lru_cache(maxsize=64)
def render(text: str, fallback_title: str) -> RenderedPage:
    """The page as HTML, cached by its text: ~7 ms a page (30 ms the longest), paid once, not per visitor."""
    md = _parser()
    tokens = md.parse(text)
    return RenderedPage(title=_title(tokens, fallback_title), html=md.renderer.render(tokens, md.options, {}))
