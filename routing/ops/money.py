"""Amounts of money as the operator pages show them: US dollars, always with the currency (docs/dashboard.md#currency).

Prices and budgets are configured in US dollars (docs/limits.md#budgets), so every
spend, cost and budget amount on the admin and dashboard pages reads `$0.0123`,
with `(USD)` in the column heading.
"""

from __future__ import annotations

from decimal import Decimal

CURRENCY = "USD"


def usd(value: Decimal | float | int | None, places: int = 4) -> str:
    """`$1,234.5678`; None (no cost recorded) is a dash."""
    if value is None:
        return "–"
    return f"${value:,.{places}f}"
