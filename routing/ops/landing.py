"""Site furniture: the favicon (so browsers stop logging 404s), the landing page `/` and the docs pages."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import cache_control

# A switchboard jack: a dark rounded square with a green plug, as SVG (Chromium and Firefox accept it).
FAVICON_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    b'<rect width="32" height="32" rx="7" fill="#1f2933"/>'
    b'<circle cx="16" cy="16" r="7" fill="none" stroke="#3fb950" stroke-width="4"/>'
    b'<circle cx="16" cy="16" r="2.5" fill="#3fb950"/></svg>'
)


@cache_control(public=True, max_age=86400)
def favicon_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(FAVICON_SVG, content_type="image/svg+xml")


def landing_view(request: HttpRequest) -> HttpResponse:
    """`/`: where to go next (admin, dashboard, docs) and how to call the API with a key (docs/dashboard.md#landing)."""
    base = request.build_absolute_uri("/").rstrip("/")
    return render(request, "landing.html", {"title": "Switchboard", "base_url": base, "docs": doc_pages()})


_DOC_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def _docs_dir() -> Path:
    return Path(settings.BASE_DIR) / "docs"


def doc_pages() -> list[str]:
    """The names of the docs/*.md pages shipped with this installation (none when the folder is absent)."""
    folder = _docs_dir()
    return sorted(p.stem for p in folder.glob("*.md") if _DOC_NAME.match(p.stem)) if folder.is_dir() else []


def doc_view(request: HttpRequest, name: str) -> HttpResponse:
    """One docs/*.md page as plain Markdown text; only names of that folder's files, never a path."""
    if not _DOC_NAME.match(name) or name not in doc_pages():
        raise Http404("no such docs page: see /#docs for the list")
    text = (_docs_dir() / f"{name}.md").read_bytes()
    return HttpResponse(text, content_type="text/markdown; charset=utf-8")
