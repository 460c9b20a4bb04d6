"""The price of one request, from the model's per-million-token prices (routing.core.prices)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.core.prices import priced


def cost(
    model: Any, prompt_tokens: int | None, completion_tokens: int | None, classes: Mapping[str, int] | None = None
) -> float | None:
    """Price of one request from the model's per-million-token prices; None when unknown.

    A token count of 0 or None costs nothing; tokens of a kind whose price is not
    configured make the whole cost unknown rather than silently too low. The token
    classes (cache reads and writes, reasoning, audio) are priced at their own rates.
    """
    if prompt_tokens is None and completion_tokens is None:
        return None
    total = priced(
        model.input_price_per_mtok,
        model.output_price_per_mtok,
        getattr(model, "class_prices", None),
        prompt_tokens or 0,
        completion_tokens or 0,
        classes,
        strict=True,
    )
    return None if total is None else round(total, 8)
