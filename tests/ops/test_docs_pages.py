"""The docs pages rendered as HTML and the API reference pages (docs/dashboard.md#docs-pages): what a visitor
of `/docs/<page>.md` and `/reference/` gets, every link between the rendered pages landing on its target,
and nothing served from outside the docs folder or from another host."""

from __future__ import annotations

import re
from html import unescape

import pytest

from routing.ops.landing import doc_pages

LINK = re.compile(r'href="([a-z0-9-]+\.md)?(?:#([^"]+))?"')
IDS = re.compile(r'\sid="([^"]+)"')
EXTERNAL = re.compile(r"""(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?//""", re.IGNORECASE)


def body(answer) -> bytes:
    return b"".join(answer.streaming_content) if answer.streaming else answer.content


@pytest.mark.django_db
def test_a_docs_page_is_html_with_its_headings_tables_and_links_and_its_markdown_stays_one_click_away(client):
    answer = client.get("/docs/api.md")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/html; charset=utf-8"
    page = answer.content.decode()
    assert '<h1 id="http-api">HTTP API</h1>' in page and "<title>HTTP API · Switchboard docs</title>" in page
    assert re.search(r'<h2 id="[a-z0-9-]+">', page) and "<table>" in page and "<th>" in page
    assert '<a id="openapi"></a>' in page  # the docs' own anchors are kept, not escaped
    assert 'href="errors.md' in page  # a link to another page, relative: /docs/errors.md
    assert "<pre><code" in page and "# HTTP API" not in page
    assert 'href="/docs/api.md?raw=1"' in page or 'href="?raw=1"' in page

    raw = client.get("/docs/api.md?raw=1")
    assert raw.status_code == 200 and raw["Content-Type"] == "text/markdown; charset=utf-8"
    assert raw.content.startswith(b"# HTTP API")


@pytest.mark.django_db
def test_every_link_between_the_rendered_docs_lands_on_a_page_and_an_id_and_every_picture_is_served(client):
    pages = doc_pages()
    html = {name: client.get(f"/docs/{name}.md").content.decode() for name in pages}
    ids = {name: set(IDS.findall(text)) for name, text in html.items()}
    broken, links = [], 0
    for name, text in html.items():
        for target, anchor in LINK.findall(text):
            links += 1
            target_name = target[:-3] if target else name
            if target_name not in ids:
                broken.append(f"{name}: no page {target}")
            elif anchor and unescape(anchor) not in ids[target_name]:
                broken.append(f"{name}: no #{anchor} in {target_name}.md")
        for picture in re.findall(r'<img src="([^"]+)"', text):
            answer = client.get(f"/docs/{picture}")
            if answer.status_code != 200 or answer["Content-Type"] != "image/png":
                broken.append(f"{name}: picture {picture} -> {answer.status_code}")
    assert links > 300 and broken == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/docs/no-such-page.md",
        "/docs/README.md",  # the source tree's index, not one of the listed pages
        "/docs/..%2FREADME.md",
        "/docs/../README.md",
        "/docs/%2E%2E.md",
        "/docs/..%2F..%2Fetc%2Fpasswd.md",
        "/docs/%2Fetc%2Fpasswd.md",
        "/docs/..%2Fdocs%2Fapi.md",
        "/docs/no-such-picture.png",
        "/docs/..%2Fdocs%2Fanalytics.png",
    ],
)
def test_an_unknown_page_or_a_path_is_a_404_page_that_lists_the_real_ones(client, url):
    answer = client.get(url)
    assert answer.status_code == 404 and answer["Content-Type"] == "text/html; charset=utf-8"
    page = answer.content.decode()
    assert '<p id="error" class="error" role="alert">' in page
    assert 'href="/docs/api.md"' in page  # where to go instead
    assert "SECRET_KEY" not in page and "root:" not in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "spec"),
    [("/reference/", "/v1/openapi.json"), ("/reference/management/", "/api/v1/openapi.json")],
)
def test_the_api_reference_page_loads_swagger_ui_from_this_server_only(client, url, spec):
    answer = client.get(url)
    assert answer.status_code == 200 and answer["Content-Type"] == "text/html; charset=utf-8"
    page = answer.content.decode()
    assert f'data-spec-url="{spec}"' in page and "validatorUrl: null" in page
    assert EXTERNAL.findall(page) == []  # no CDN, no font service, nothing from another host
    scripts = re.findall(r'<script src="([^"]+)"', page)
    styles = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
    assert any(s.endswith("/swagger-ui-bundle.js") for s in scripts) and styles
    for asset in scripts + styles:
        served = client.get(asset)
        assert served.status_code == 200, asset
        assert len(body(served)) > 100_000, asset  # the real dist file, not a stub
    if spec.startswith("/api/"):  # the /v1 document is the gateway's (tests/gateway/test_openapi.py)
        assert client.get(spec).status_code == 200


@pytest.mark.django_db
def test_the_landing_page_links_the_rendered_reference_and_the_docs_pages_link_back(client):
    landing = client.get("/").content.decode()
    assert 'id="reference-link" href="/reference/"' in landing
    assert 'href="/reference/management/"' in landing
    doc = client.get("/docs/limits.md").content.decode()
    assert 'href="/reference/"' in doc and 'href="/#docs"' in doc
