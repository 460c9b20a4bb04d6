"""Site furniture: the favicon (so browsers stop logging 404s), the landing page `/`, the docs pages rendered
as HTML (routing.ops.docs_render) and the API reference pages (docs/dashboard.md#docs-pages)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_cache_control
from django.utils.safestring import mark_safe
from django.views.decorators.cache import cache_control

from routing.ops import docs_render

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
    """One docs/*.md page rendered as HTML (`?raw=1`: the Markdown text); only that folder's files, never a path."""
    if not _DOC_NAME.match(name) or name not in doc_pages():
        return _not_found(request, f"No docs page '{name[:80]}.md'.")
    text = (_docs_dir() / f"{name}.md").read_text(encoding="utf-8")
    if request.GET.get("raw"):
        return HttpResponse(text, content_type="text/markdown; charset=utf-8")
    page = docs_render.render(text, name)
    # mark_safe: the HTML comes from the installation's own docs files (trusted), never from the request.
    context = {"title": page.title, "name": name, "body": mark_safe(page.html)}
    return render(request, "docs/page.html", context)


def doc_image_view(request: HttpRequest, name: str) -> HttpResponse:
    """A docs/*.png picture the pages show (`![...](analytics.png)` resolves here); only that folder's files."""
    path = _docs_dir() / f"{name}.png"
    if not _DOC_NAME.match(name) or not path.is_file():
        return _not_found(request, f"No docs picture '{name[:80]}.png'.")
    answer = HttpResponse(path.read_bytes(), content_type="image/png")
    patch_cache_control(answer, public=True, max_age=3600)  # the picture only: a 404 is not kept
    return answer


def _not_found(request: HttpRequest, message: str) -> HttpResponse:
    """404 as the operator pages show an error (`#error`), with the pages there are instead."""
    context = {"title": "docs page not found", "message": message, "docs": doc_pages()}
    return render(request, "docs/not_found.html", context, status=404)


# The API reference pages: Swagger UI (from drf-spectacular-sidecar's static files, no CDN) over an OpenAPI
# document this installation serves. Public, as the documents themselves and the docs pages are.
REFERENCES: dict[str, tuple[str, str]] = {
    "v1": ("OpenAI-compatible API (/v1)", "/v1/openapi.json"),  # served by the gateway's ASGI app
    "management": ("Management API (/api/v1)", "/api/v1/openapi.json"),  # routing.ops.api.urls
}


def reference_view(request: HttpRequest, api: str = "v1") -> HttpResponse:
    """`/reference/` and `/reference/management/`: an OpenAPI document rendered in the browser."""
    title, spec_url = REFERENCES[api]
    context = {"title": title, "spec_url": spec_url, "api": api, "references": REFERENCES}
    return render(request, "docs/reference.html", context)
