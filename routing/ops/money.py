"""Amounts of money as the operator pages show them: US dollars, always with the currency (docs/dashboard.md#currency).

Prices and budgets are configured in US dollars (docs/limits.md#budgets), so every
spend, cost and budget amount on the admin and dashboard pages reads `$0.0123`,
with `(USD)` in the column heading.
"""

from __future__ import annotations

from decimal import Decimal

CURRENCY = "USD"


def usd(value: Decimal | float | int | None, places: int = 4) -> str:
    """`$1,234.5678`; None (no cost recorded) is a dash. A cost too small for `places` reads
    `< $0.0001`, never `$0.0000`: a request that cost something must not look free."""
    if value is None:
        return "–"
    if value and abs(value) < Decimal(1).scaleb(-places):
        return f"{'> -' if value < 0 else '< '}${Decimal(1).scaleb(-places):.{places}f}"
    return f"${value:,.{places}f}"
