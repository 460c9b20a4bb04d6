"""First-visit papercuts of the operator pages: "View site", the favicon."""

from __future__ import annotations

import pytest


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_user("site-admin", password="pw-site-123", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_view_site_in_the_admin_header_goes_to_the_dashboard(staff_client):
    page = staff_client.get("/admin/").content.decode()
    assert 'href="/dashboard/"' in page and "View site" in page
    assert staff_client.get("/dashboard/").status_code == 200  # where it goes exists


@pytest.mark.django_db
def test_the_favicon_is_served_and_linked_from_admin_and_dashboard(staff_client):
    icon = staff_client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    for page in ("/admin/", "/dashboard/"):
        assert '<link rel="icon" href="/favicon.ico"' in staff_client.get(page).content.decode()


@pytest.mark.django_db
def test_the_admin_is_titled_switchboard_and_its_index_links_every_operator_page(staff_client):
    page = staff_client.get("/admin/").content.decode()
    assert "Django administration" not in page and "Django site admin" not in page
    assert "<title>Switchboard: configuration and operations | Switchboard admin</title>" in page
    assert 'id="site-name"><a href="/admin/">Switchboard administration</a>' in page
    for link in (
        '"/dashboard/"',
        '"/dashboard/analytics/"',
        '"/dashboard/requests/"',
        '"/dashboard/limits/"',
        '"/admin/routing/configrevision/"',
        '"/dashboard/playground/"',
    ):
        assert f"href={link}" in page, link


@pytest.mark.django_db
def test_the_landing_page_points_anonymous_visitors_at_admin_dashboard_docs_and_the_api(client):
    answer = client.get("/")
    assert answer.status_code == 200
    page = answer.content.decode()
    for link in ('href="/admin/"', 'href="/dashboard/"', 'href="/v1/openapi.json"', 'href="/docs/api.md"'):
        assert link in page, link
    assert "curl -s http://testserver/v1/models" in page
    assert "Authorization: Bearer $KEY" in page
    assert '<link rel="icon" href="/favicon.ico"' in page


@pytest.mark.django_db
def test_docs_pages_are_served_as_markdown_and_only_from_the_docs_folder(client):
    answer = client.get("/docs/api.md?raw=1")  # the Markdown text; without ?raw=1 the page is rendered
    assert answer.status_code == 200 and answer["Content-Type"] == "text/markdown; charset=utf-8"
    assert answer.content.startswith(b"#")
    assert client.get("/docs/no-such-page.md").status_code == 404
    assert client.get("/docs/..%2FREADME.md").status_code == 404
    assert client.get("/docs/%2E%2E.md").status_code == 404
