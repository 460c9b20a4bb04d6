"""`{% admin_pages as pages %}`: the admin pages that are not change lists (routing.ops.admin_views.PAGES)."""

from __future__ import annotations

from django import template

from routing.ops import admin_views
from routing.ops.admin_views import Page

register = template.Library()


@register.simple_tag
def admin_pages() -> tuple[Page, ...]:
    return admin_views.PAGES
