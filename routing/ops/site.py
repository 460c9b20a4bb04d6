"""Site furniture of the operator pages: the favicon (so browsers stop logging 404s)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
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
