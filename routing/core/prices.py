"""Token classes and their prices (docs/usage-records.md#token-classes, docs/configuration.md#prices).

Providers bill some tokens of a request at other rates than plain input and output: prompt-cache
reads and writes (Anthropic's 5-minute and 1-hour writes at two prices), reasoning tokens, audio.
`token_classes` reads them from a provider's usage object (OpenAI's or Anthropic's shape) into
one normalised dict; `priced` is the one price of a request from its tokens and classes.

The record's `prompt_tokens` is the whole prompt (Anthropic's `input_tokens` + cache reads +
cache writes; OpenAI's `prompt_tokens`, which includes its cached and audio tokens) and
`completion_tokens` the whole completion (reasoning and audio included, as both providers
count them): a class's tokens are taken out of the plain rate and priced at the class's own.
A class without a price of its own is priced at its fallback's (cache and audio input at the
input price, reasoning and audio output at the output price, a 1-hour write at the 5-minute
write price), so a model configured with only input and output prices costs what it did.
Pure Python: used by the snapshot, the budgets and the usage record alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The token classes a record stores, each taken out of the prompt ("in") or the completion ("out").
CLASSES: dict[str, str] = {
    "cache_read": "in",
    "cache_write": "in",  # a 5-minute prompt-cache write (Anthropic's default)
    "cache_write_1h": "in",
    "audio_input": "in",
    "reasoning": "out",
    "audio_output": "out",
}


@dataclass(frozen=True, slots=True)
class ClassPrices:
    """USD per million tokens of each class; None: priced at its fallback (see the module)."""

    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None
    audio_input: float | None = None
    reasoning: float | None = None
    audio_output: float | None = None


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


# Any mapping, a dict (every parsed answer's) told first: in C, where `Mapping` alone is a Python-level
# ABC check per test. An empty or absent part adds only zeros, which are dropped: it is not tested at all.
_MAPPING = (dict, Mapping)


def token_classes(usage: Any) -> dict[str, int] | None:
    """The priced classes of an OpenAI or Anthropic usage object (only those present, > 0), or None.

    OpenAI: `prompt_tokens_details.cached_tokens` / `audio_tokens`,
    `completion_tokens_details.reasoning_tokens` / `audio_tokens`. Anthropic:
    `cache_read_input_tokens`, `cache_creation_input_tokens`, split by
    `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens` when given.
    """
    if not isinstance(usage, _MAPPING):
        return None
    out: dict[str, int] = {}
    prompt = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    if prompt and isinstance(prompt, _MAPPING):  # absent (None) told before the ABC check
        out["cache_read"] = _int(prompt.get("cached_tokens"))
        out["audio_input"] = _int(prompt.get("audio_tokens"))
    completion = usage.get("completion_tokens_details") or usage.get("output_tokens_details")
    if completion and isinstance(completion, _MAPPING):
        out["reasoning"] = _int(completion.get("reasoning_tokens"))
        out["audio_output"] = _int(completion.get("audio_tokens"))
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        out["cache_read"] = _int(usage.get("cache_read_input_tokens"))
        written = _int(usage.get("cache_creation_input_tokens"))
        split = usage.get("cache_creation")
        hour = _int(split.get("ephemeral_1h_input_tokens")) if isinstance(split, _MAPPING) else 0
        out["cache_write_1h"] = min(hour, written)
        out["cache_write"] = written - out["cache_write_1h"]
    if not out:  # no detail sent (most answers): no comprehension to run
        return None
    kept = {name: n for name, n in out.items() if n}
    return kept or None


def priced(
    input_price: float | None,
    output_price: float | None,
    prices: ClassPrices | None,
    prompt: int,
    completion: int,
    classes: Mapping[str, int] | None,
    strict: bool,
) -> float | None:
    """USD of a request. `strict` (the usage record): tokens of a kind without any price make the
    cost unknown (None) rather than silently too low; not strict (budgets): a missing price costs 0."""
    rates = {"in": input_price, "out": output_price}
    plain = {"in": prompt, "out": completion}
    total = 0.0
    if classes:
        for name, tokens in classes.items():
            side = CLASSES.get(name)
            if side is None or not tokens:
                continue
            tokens = min(tokens, plain[side])  # never more than the side's tokens: nothing counted twice
            plain[side] -= tokens
            price = _class_price(name, prices, rates[side])
            if price is None:
                if strict:
                    return None
                continue
            total += tokens * price
    for side in ("in", "out"):
        tokens, price = plain[side], rates[side]
        if not tokens:
            continue
        if price is None:
            if strict:
                return None
            continue
        total += tokens * price
    return total / 1_000_000


def _class_price(name: str, prices: ClassPrices | None, plain: float | None) -> float | None:
    own = getattr(prices, name) if prices is not None else None
    if own is not None:
        return own
    if name == "cache_write_1h" and prices is not None and prices.cache_write is not None:
        return prices.cache_write
    return plain


# The keys of a price entry (a model's `prices` version, a deployment's `prices`): input, output and the classes.
PRICE_KEYS: tuple[str, ...] = ("input", "output", *CLASSES)


@dataclass(frozen=True, slots=True)
class PriceVersion:
    """The prices in effect from `starts` (UTC epoch seconds of `effective_from`); `label` is the version a
    usage record names (`effective_from`, plus `+deployment` when a deployment's negotiated prices apply)."""

    starts: float
    label: str
    input: float | None
    output: float | None
    classes: ClassPrices | None


def in_effect(versions: tuple[PriceVersion, ...], now: float) -> PriceVersion | None:
    """The latest version that started by `now` (versions sorted by `starts`), or None before the first."""
    found = None
    for version in versions:
        if version.starts > now:
            break
        found = version
    return found


def merged(base: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, float | None]:
    """The prices of `entry` over `base` (both keyed by PRICE_KEYS): an entry names only what changes."""
    out: dict[str, float | None] = {key: base.get(key) for key in PRICE_KEYS}
    for key in PRICE_KEYS:
        if entry.get(key) is not None:
            out[key] = float(entry[key])
    return out


def version_of(starts: float, label: str, prices: Mapping[str, float | None]) -> PriceVersion:
    found = {name: prices[name] for name in CLASSES if prices.get(name) is not None}
    return PriceVersion(
        starts, label, prices.get("input"), prices.get("output"), ClassPrices(**found) if found else None
    )


def prices_now(model: Any, now: float) -> tuple[str, float | None, float | None, ClassPrices | None]:
    """(version label, input, output, class prices) of `model` (a ModelSpec) in effect at `now`: its
    dated `prices` entry, else its flat price fields (label "", or "deployment" for negotiated ones)."""
    versions = model.price_versions
    if versions:
        version = in_effect(versions, now)
        if version is not None:
            return version.label, version.input, version.output, version.classes
    return model.price_label, model.input_price_per_mtok, model.output_price_per_mtok, model.class_prices
