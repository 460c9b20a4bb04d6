"""Token classes priced exactly (docs/usage-records.md#token-classes): recorded usage objects in the
providers' documented shapes, priced at their published per-million-token prices to the cent
(here to the micro-dollar) of the figure worked out by hand from those prices."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from routing.core.prices import ClassPrices, priced, token_classes

FIXTURES = Path(__file__).parent.parent / "fixtures" / "usage"

# (fixture, (input, output) prices, class prices, prompt, completion, expected USD)
CASES = [
    # Claude Sonnet 4: $3 in, $15 out, $0.30 cache read, $3.75 5-minute write, $6 1-hour write.
    # prompt = 2048 + 1800 + 556; 2048*3 + 1800*0.30 + 456*3.75 + 100*6 + 503*15 = 16539 µ$
    (
        "anthropic_cache.json",
        (3, 15),
        ClassPrices(cache_read=0.30, cache_write=3.75, cache_write_1h=6),
        4404,
        503,
        "0.016539",
    ),
    # gpt-4o: $2.50 in, $1.25 cached in, $10 out. (2006-1920)*2.5 + 1920*1.25 + 300*10 = 5615 µ$
    ("openai_cached.json", (2.5, 10), ClassPrices(cache_read=1.25), 2006, 300, "0.005615"),
    # o3-mini: $1.10 in, $4.40 out; reasoning tokens are output tokens. 9*1.1 + 446*4.4 = 1972.3 µ$
    ("openai_reasoning.json", (1.1, 4.4), ClassPrices(cache_read=0.55), 9, 446, "0.0019723"),
    # gpt-4o-audio-preview: text $2.50 / $10, audio $40 / $80. 20*2.5 + 80*40 + 100*10 + 400*80 = 36250 µ$
    ("openai_audio.json", (2.5, 10), ClassPrices(audio_input=40, audio_output=80), 100, 500, "0.03625"),
]


def usage_of(name: str) -> dict:
    return orjson.loads((FIXTURES / name).read_bytes())["usage"]


@pytest.mark.parametrize(("name", "plain", "classes", "prompt", "completion", "usd"), CASES, ids=[c[0] for c in CASES])
def test_recorded_usage_is_priced_at_the_published_prices(name, plain, classes, prompt, completion, usd) -> None:
    found = token_classes(usage_of(name))
    cost = priced(*plain, classes, prompt, completion, found, strict=True)
    assert cost is not None
    assert round(Decimal(str(cost)), 8) == Decimal(usd)


def test_anthropic_cache_writes_are_split_into_5_minute_and_1_hour() -> None:
    assert token_classes(usage_of("anthropic_cache.json")) == {
        "cache_read": 1800,
        "cache_write": 456,
        "cache_write_1h": 100,
    }
    # Without the split, every write is a 5-minute write.
    assert token_classes({"input_tokens": 5, "cache_creation_input_tokens": 40, "output_tokens": 1}) == {
        "cache_write": 40
    }


def test_a_model_with_only_input_and_output_prices_costs_what_it_did() -> None:
    """Classes without prices of their own are priced as plain input or output: no change for old configs."""
    found = token_classes(usage_of("openai_cached.json"))
    assert priced(2.5, 10, None, 2006, 300, found, strict=True) == pytest.approx((2006 * 2.5 + 300 * 10) / 1e6)
    # A 1-hour write without its own price takes the 5-minute write's.
    assert priced(3, 15, ClassPrices(cache_write=3.75), 100, 0, {"cache_write_1h": 100}, True) == pytest.approx(375e-6)


def test_class_tokens_never_count_twice_nor_beyond_their_side() -> None:
    # A hostile usage object claiming more cached tokens than the prompt: capped at the prompt.
    assert priced(2, 8, ClassPrices(cache_read=1), 10, 0, {"cache_read": 50}, True) == pytest.approx(10e-6)


def test_a_class_without_any_price_makes_the_record_cost_unknown_but_costs_the_budget_nothing() -> None:
    assert priced(None, 10, None, 100, 10, {"cache_read": 50}, strict=True) is None
    assert priced(None, 10, None, 100, 10, {"cache_read": 50}, strict=False) == pytest.approx(100e-6)
