"""A docs page as HTML (docs/dashboard.md#docs-pages): GitHub's heading anchors, repeated headings numbered,
the page title from its first `#` heading, tables and raw HTML kept."""

from __future__ import annotations

import pytest

from routing.ops.docs_render import _parser, render, slug


@pytest.fixture(autouse=True)
def fresh_render():
    """Each test renders anew: a page rendered earlier in the process would be served from the cache."""
    render.cache_clear()
    _parser.cache_clear()
    yield
    render.cache_clear()
    _parser.cache_clear()


def test_a_heading_anchor_is_githubs():
    assert slug("  Price *versions* and `sync`  ") == "price-versions-and-sync"
    assert slug("Org-scoped staff: <b>who</b> sees what?") == "org-scoped-staff-who-sees-what"
    assert slug("A  B") == "a--b"
    assert slug("Ünïcode ok") == "ünïcode-ok"


def test_every_heading_gets_its_anchor_and_a_repeated_one_a_number():
    page = render("# Title\n\n## Setup\n\n## Setup\n\n### Setup\n\n## Other\n", "fallback")
    assert '<h1 id="title">Title</h1>' in page.html
    assert '<h2 id="setup">Setup</h2>' in page.html
    assert '<h2 id="setup-1">Setup</h2>' in page.html
    assert '<h3 id="setup-2">Setup</h3>' in page.html
    assert '<h2 id="other">Other</h2>' in page.html


def test_the_title_is_the_first_top_heading_in_plain_text():
    page = render("Intro\n\n## Not this\n\n# The `switchboard` *gateway*\n\n# Second\n", "fallback")
    assert page.title == "The switchboard gateway"


def test_a_page_without_a_top_heading_or_with_an_empty_one_is_titled_by_the_fallback():
    assert render("## Only a section\n\ntext\n", "page.md").title == "page.md"
    assert render("#\n\ntext\n", "empty.md").title == "empty.md"
    assert render("", "blank.md").title == "blank.md"


def test_tables_strikethrough_and_raw_html_are_kept():
    html = render('<a id="keep"></a>\n\n| a | b |\n|---|---|\n| 1 | ~~2~~ |\n', "t").html
    assert '<a id="keep"></a>' in html
    assert "<table>" in html and "<td>1</td>" in html
    assert "<s>2</s>" in html
