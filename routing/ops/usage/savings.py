"""Dollars the caches saved, computed when a page asks, from the usage records (docs/operations.md#savings).

Two savings, neither stored per request (the request path does no work for them):

- **prompt cache**: an upstream call whose provider read part of the prompt from its cache paid the
  cache-read price for those tokens (`cache_read_tokens`) instead of the input price; saved
  `cache_read_tokens x (input price - cache-read price)`. A model without a cache-read price of its own was
  charged the input price for them: it saved nothing.
- **response cache**: a hit (`cached`) made no upstream call and cost 0; saved what the answer it replayed
  cost: its recorded tokens and token classes priced as the request path prices a call
  (routing.core.prices.priced).

Prices come from the live configuration: the version the record names (`price_version`, the deployment's
negotiated prices when it says so), else, when the configuration no longer has that version, the prices
in effect now. A record whose model is no longer configured, or has no input price, cannot be priced:
its tokens are counted as `unpriced_records` and save nothing. One query: the view's records that used a
cache, grouped by the dimensions asked plus (model, provider, price version, hit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from routing.config.snapshot import ModelSpec, Snapshot
from routing.core.prices import CLASSES, ClassPrices, priced, prices_now

PRICE_COLUMNS = ("model_used", "provider", "price_version", "cached")
_TOKEN_SUMS = {
    "prompt": "prompt_tokens",
    "completion": "completion_tokens",
    **{name: f"{name}_tokens" for name in CLASSES},
}


@dataclass(slots=True)
class Saved:
    """What the caches saved one group (USD), and the traffic behind it."""

    prompt_cache_usd: float = 0.0
    response_cache_usd: float = 0.0
    cached_input_tokens: int = 0  # prompt tokens read from a provider's prompt cache
    response_cache_hits: int = 0
    unpriced_records: int = 0  # records of a model the configuration cannot price any more

    @property
    def total_usd(self) -> float:
        return self.prompt_cache_usd + self.response_cache_usd

    def add(self, other: Saved) -> None:
        self.prompt_cache_usd += other.prompt_cache_usd
        self.response_cache_usd += other.response_cache_usd
        self.cached_input_tokens += other.cached_input_tokens
        self.response_cache_hits += other.response_cache_hits
        self.unpriced_records += other.unpriced_records

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_cache_usd": round(self.prompt_cache_usd, 8),
            "response_cache_usd": round(self.response_cache_usd, 8),
            "total_usd": round(self.total_usd, 8),
            "cached_input_tokens": self.cached_input_tokens,
            "response_cache_hits": self.response_cache_hits,
            "unpriced_records": self.unpriced_records,
        }


Prices = tuple[float | None, float | None, ClassPrices | None]  # input, output, classes (USD per million)


def prices_of(snapshot: Snapshot, model_id: str, provider: str, version: str, now: float) -> Prices | None:
    """The prices a record of `model_id` served by `provider` was charged at (see the module), or None."""
    model = snapshot.models.get(model_id)
    if model is None:
        return None
    if "deployment" in version:  # the deployment's negotiated prices: the deployment of that provider
        model = next((d.model for d in model.deployments if d.provider.name == provider), model)
    return _version_prices(model, version, now)


def _version_prices(model: ModelSpec, version: str, now: float) -> Prices:
    if version == model.price_label:  # its undated prices ("", or "deployment" for negotiated ones)
        return model.input_price_per_mtok, model.output_price_per_mtok, model.class_prices
    found = next((v for v in model.price_versions if v.label == version), None)
    if found is not None:
        return found.input, found.output, found.classes
    _, input_price, output_price, classes = prices_now(model, now)
    return input_price, output_price, classes


def _group_saved(row: Mapping[str, Any], prices: Prices | None) -> Saved:
    """The saving of one group of records: hits (the whole replayed answer) or calls (cache reads)."""
    requests = int(row["n"])
    if row["cached"]:
        saved = Saved(response_cache_hits=requests)
        input_price, output_price, classes = prices or (None, None, None)
        if input_price is None:
            saved.unpriced_records = requests
            return saved
        tokens = {name: int(row[name] or 0) for name in CLASSES}
        total = priced(
            input_price, output_price, classes, int(row["prompt"] or 0), int(row["completion"] or 0), tokens, False
        )
        saved.response_cache_usd = total or 0.0
        return saved
    read = int(row["cache_read"] or 0)
    saved = Saved(cached_input_tokens=read)
    if prices is None or prices[0] is None:
        saved.unpriced_records = requests
        return saved
    input_price, _, classes = prices
    read_price = classes.cache_read if classes is not None and classes.cache_read is not None else input_price
    saved.prompt_cache_usd = max(read * (input_price - read_price), 0.0) / 1_000_000
    return saved


def saved_by(
    records: QuerySet[Any], snapshot: Snapshot, group_by: Sequence[str], now: float
) -> dict[tuple[Any, ...], Saved]:
    """The savings of `records` per value of the `group_by` columns (only groups that saved or used a cache)."""
    used = records.filter(Q(cache_read_tokens__gt=0) | Q(cached=True))
    columns = list(dict.fromkeys([*group_by, *PRICE_COLUMNS]))
    rows = used.values(*columns).annotate(n=Count("id"), **{k: Sum(c) for k, c in _TOKEN_SUMS.items()}).order_by()
    out: dict[tuple[Any, ...], Saved] = {}
    cache: dict[tuple[str, str, str], Prices | None] = {}
    for row in rows:
        key = (row["model_used"], row["provider"], row["price_version"])
        if key not in cache:
            cache[key] = prices_of(snapshot, *key, now=now)
        out.setdefault(tuple(row[c] for c in group_by), Saved()).add(_group_saved(row, cache[key]))
    return out
