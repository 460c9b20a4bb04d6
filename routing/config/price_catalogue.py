"""A maintained price catalogue against the configured prices (docs/commands.md#sync_prices).

`propose(document, catalogue, day)` compares each configured model's price in effect on `day`
with what the catalogue says its upstream model costs, and proposes a dated price version
(`effective_from: day`) for every model whose prices differ. A proposal is only that: the
document is not touched here; accepting one (routing.config.price_proposals) appends the
version through the one validation and the config history, so an operator's own prices and
versions stay as they are and apply up to the day before.

Catalogues: the `genai-prices` package (pydantic's maintained catalogue, pinned in
requirements.txt) or a YAML/JSON file of its shape: providers, each with `id` and `models`,
each model with `id`, optional `aliases` and `prices` in USD per million tokens (`input_mtok`,
`output_mtok`, `cache_read_mtok`, `cache_write_mtok`, `cache_write_1h_mtok`, `input_audio_mtok`,
`output_audio_mtok`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Protocol

from routing.config.snapshot import flat_prices
from routing.core.prices import merged

# catalogue key -> Switchboard price key (routing.core.prices.PRICE_KEYS)
KEYS = {
    "input_mtok": "input",
    "output_mtok": "output",
    "cache_read_mtok": "cache_read",
    "cache_write_mtok": "cache_write",
    "cache_write_1h_mtok": "cache_write_1h",
    "input_audio_mtok": "audio_input",
    "output_audio_mtok": "audio_output",
}
# A provider's dialect -> the catalogue's provider id, so "gpt-4o" on Azure is priced as Azure prices it.
DIALECT_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "vertex": "google",
    "bedrock": "aws",
    "azure_openai": "azure",
    "cohere": "cohere",
}


class Catalogue(Protocol):
    def lookup(self, upstream_model: str, provider: str | None) -> dict[str, float] | None:
        """The catalogue's prices of `upstream_model` (by Switchboard price key), or None when it has none."""
        ...


@dataclass(frozen=True, slots=True)
class Proposal:
    """A dated price version proposed for one model: the catalogue's prices, and what it is priced at now."""

    model: str
    upstream_model: str
    effective_from: str
    prices: dict[str, float]
    current: dict[str, float | None] = field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        """The `prices` entry accepting it appends (docs/configuration.md#price-versions)."""
        return {"effective_from": self.effective_from, **self.prices}

    def changes(self) -> list[str]:
        """What differs, e.g. "input 2.5 -> 2"."""
        return [
            f"{key} {_text(self.current.get(key))} -> {_text(value)}"
            for key, value in self.prices.items()
            if self.current.get(key) != value
        ]


def _text(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _number(value: Any) -> float | None:
    """A catalogue price: a number, or the base of a tiered price; None for anything else."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return float(value)
    base = getattr(value, "base", None) if not isinstance(value, Mapping) else value.get("base")
    return float(base) if isinstance(base, (int, float, Decimal)) else None


def prices_of(raw: Any) -> dict[str, float] | None:
    """Switchboard price keys from a catalogue `prices` mapping (or object); None when it names none."""
    if isinstance(raw, list):  # conditional prices: the first applies when no condition matches
        first = raw[0] if raw else None  # an empty list names no prices (not an IndexError)
        raw = first.get("prices") if isinstance(first, Mapping) else getattr(first, "prices", None)
    values = raw if isinstance(raw, Mapping) else getattr(raw, "__dict__", {})
    out = {}
    for key, name in KEYS.items():
        number = _number(values.get(key))
        if number is not None:
            out[name] = number
    return out or None


class FileCatalogue:
    """A catalogue read from a YAML/JSON document of the genai-prices shape (`{providers: [...]}` or the list)."""

    def __init__(self, data: Any) -> None:
        providers = data.get("providers") if isinstance(data, Mapping) else data
        if not isinstance(providers, list):
            raise ValueError("a price catalogue is a list of providers, each {id, models: [{id, prices}]}")
        self._by_provider: dict[str, dict[str, dict[str, float]]] = {}
        self._any: dict[str, dict[str, float]] = {}
        for p in providers:
            models = self._by_provider.setdefault(str(p.get("id", "")).lower(), {})
            for m in p.get("models") or ():
                prices = prices_of(m.get("prices"))
                if prices is None:
                    continue
                for name in (m.get("id"), *(m.get("aliases") or ())):
                    if isinstance(name, str) and name:
                        models[name.lower()] = prices
                        self._any.setdefault(name.lower(), prices)

    def lookup(self, upstream_model: str, provider: str | None) -> dict[str, float] | None:
        name = upstream_model.lower()
        if provider is not None and name in self._by_provider.get(provider, {}):
            return self._by_provider[provider][name]
        return self._any.get(name)


class PackageCatalogue:
    """The `genai-prices` package's bundled catalogue (its model matching: ids, prefixes and aliases)."""

    def __init__(self) -> None:
        from genai_prices.data_snapshot import get_snapshot  # reason: only sync_prices needs the catalogue

        self._snapshot = get_snapshot()

    def lookup(self, upstream_model: str, provider: str | None) -> dict[str, float] | None:
        for provider_id in (provider, None) if provider is not None else (None,):
            try:
                _, model = self._snapshot.find_provider_model(upstream_model, None, provider_id, None)
            except LookupError:
                continue
            return prices_of(model.prices)
        return None


def current_prices(item: Mapping[str, Any], day: date) -> dict[str, float | None]:
    """The prices a model item is priced at on `day`: its flat fields, then its versions started by then."""
    out = flat_prices(item)
    for entry in sorted(item.get("prices") or (), key=lambda e: str(e["effective_from"])):
        if str(entry["effective_from"]) <= day.isoformat():
            out = merged(out, entry)
    return out


def propose(document: Mapping[str, Any], catalogue: Catalogue, day: date) -> tuple[list[Proposal], list[str]]:
    """Proposals for every configured model whose catalogue price differs from its price on `day`, and a note
    per model left as it is (not in the catalogue; a version already starts that day)."""
    dialects = {p["name"]: p.get("dialect", "openai") for p in document.get("providers") or ()}
    proposals: list[Proposal] = []
    notes: list[str] = []
    for item in document.get("models") or ():
        listed = item.get("deployments") or ()
        provider = listed[0]["provider"] if listed else item.get("provider")
        upstream = listed[0]["upstream_model"] if listed else item.get("upstream_model")
        if not upstream:
            continue
        found = catalogue.lookup(upstream, DIALECT_PROVIDERS.get(dialects.get(provider, ""), None))
        if found is None:
            notes.append(f"{item['id']}: {upstream} is not in the catalogue")
            continue
        now = current_prices(item, day)
        if all(now.get(key) == value for key, value in found.items()):
            continue
        if any(str(e.get("effective_from")) == day.isoformat() for e in item.get("prices") or ()):
            notes.append(f"{item['id']}: a price version already starts on {day}: not overwritten")
            continue
        proposals.append(Proposal(item["id"], upstream, day.isoformat(), found, now))
    return proposals, notes


def today() -> date:
    return datetime.now(UTC).date()
