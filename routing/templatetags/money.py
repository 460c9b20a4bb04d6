"""`{{ amount|usd }}` and `{{ amount|usd:6 }}` in templates: routing.ops.money.usd."""

from __future__ import annotations

from typing import Any

from django import template

from routing.ops.money import usd as format_usd

register = template.Library()


@register.filter
def usd(value: Any, places: int = 4) -> str:
    if value in (None, ""):
        return "–"
    return format_usd(value, int(places))
