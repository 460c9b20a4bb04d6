"""The price of one request, from the model's per-million-token prices."""

from __future__ import annotations

from typing import Any


def cost(model: Any, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
    """Price of one request from the model's per-million-token prices; None when unknown.

    A token count of 0 or None costs nothing; tokens of a kind whose price is not
    configured make the whole cost unknown rather than silently too low.
    """
    if prompt_tokens is None and completion_tokens is None:
        return None
    total = 0.0
    for tokens, price in (
        (prompt_tokens, model.input_price_per_mtok),
        (completion_tokens, model.output_price_per_mtok),
    ):
        if not tokens:
            continue
        if price is None:
            return None
        total += tokens * price / 1_000_000
    return round(total, 8)
