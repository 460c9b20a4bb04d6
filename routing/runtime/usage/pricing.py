"""The price of one request, from the model's per-million-token prices (routing.core.prices)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from routing.core.prices import priced, prices_now


def cost(
    model: Any,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    classes: Mapping[str, int] | None = None,
    now: float | None = None,
) -> float | None:
    """Price of one request from the model's prices in effect `now`; None when unknown.

    A token count of 0 or None costs nothing; tokens of a kind whose price is not
    configured make the whole cost unknown rather than silently too low. The token
    classes (cache reads and writes, reasoning, audio) are priced at their own rates.
    """
    return priced_version(model, prompt_tokens, completion_tokens, classes, now)[1]


def priced_version(
    model: Any,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    classes: Mapping[str, int] | None = None,
    now: float | None = None,
) -> tuple[str, float | None]:
    """(the price version used, the cost) of one request (docs/usage-records.md#token-classes)."""
    label, input_price, output_price, class_prices = prices_now(model, time.time() if now is None else now)
    if prompt_tokens is None and completion_tokens is None:
        return label, None
    total = priced(
        input_price, output_price, class_prices, prompt_tokens or 0, completion_tokens or 0, classes, strict=True
    )
    return label, None if total is None else round(total, 8)
