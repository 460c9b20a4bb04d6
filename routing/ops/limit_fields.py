"""Structured admin fields for an org's or agent's `limits` and `budget` (docs/limits.md), instead of JSON boxes.

The fields only assemble the mapping the configuration document holds ({rpm, tpm},
{usd, period}); they never judge it. A number that does not parse is passed on as
typed, so the one validation path (routing.config.validation, run by the admin's
document-checked forms) refuses it with the same message an import would give,
shown next to the field.
"""

from __future__ import annotations

from typing import Any

from django import forms

from routing.config.schema import BUDGET_PERIODS
from routing.core.dimensions import LIMIT_DIMENSIONS, LIMIT_KEYS

LIMITS_HELP = (
    f"{' and '.join(d.name for d in LIMIT_DIMENSIONS).capitalize()} per minute (docs/limits.md). Blank: no limit."
)
BUDGET_HELP = (
    "Spend cap in US dollars per period (UTC calendar day or month, or total: never resets). Requests are admitted "
    "while their worst-case cost fits what is left (docs/limits.md#budgets). Models without prices cost 0. "
    "Blank amount: no budget."
)


def parse_number(text: str) -> Any:
    """`60` -> 60, `2.5` -> 2.5; anything else stays the text, for the validation to name."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


class LabelledMultiWidget(forms.MultiWidget):
    """Sub-inputs side by side, each with its own visible label (one table cell in an inline)."""

    template_name = "routing/widgets/labelled_multi.html"
    labels: tuple[str, ...] = ()

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        for sub, label in zip(context["widget"]["subwidgets"], self.labels, strict=False):
            sub["label"] = label
        return context


def _number_input(placeholder: str, step: str) -> forms.NumberInput:
    return forms.NumberInput(attrs={"placeholder": placeholder, "step": step, "style": "width: 8em"})


class LimitsWidget(LabelledMultiWidget):
    labels = tuple(f"{d.name}/min" for d in LIMIT_DIMENSIONS)

    def __init__(self) -> None:
        super().__init__({key: _number_input("none", "1") for key in LIMIT_KEYS})

    def decompress(self, value: Any) -> list[Any]:
        value = value if isinstance(value, dict) else {}
        return [value.get(key) for key in LIMIT_KEYS]


class BudgetWidget(LabelledMultiWidget):
    labels = ("US$", "per")

    def __init__(self) -> None:
        period = forms.Select(choices=[(p, p) for p in BUDGET_PERIODS])
        super().__init__({"usd": _number_input("none", "any"), "period": period})

    def decompress(self, value: Any) -> list[Any]:
        value = value if isinstance(value, dict) else {}
        return [value.get("usd"), value.get("period", "month")]


class _CompressedChange(forms.MultiValueField):
    """Changed when the value the boxes make differs from the stored one (a blank amount beside the
    default period is still "no budget", not a change)."""

    def has_changed(self, initial: Any, data: Any) -> bool:
        if not isinstance(data, list):
            return super().has_changed(initial, data)
        return self.compress(data) != initial


class LimitsField(_CompressedChange):
    """A `limits` mapping from one number box per LIMIT_DIMENSIONS row; all blank: None (no limits)."""

    widget = LimitsWidget

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", LIMITS_HELP)
        subfields = tuple(forms.CharField(required=False) for _ in LIMIT_KEYS)
        super().__init__(subfields, require_all_fields=False, required=False, **kwargs)

    def compress(self, data_list: list[Any]) -> dict[str, Any] | None:
        values = {key: parse_number(text) for key, text in zip(LIMIT_KEYS, data_list or [], strict=False) if text}
        return values or None


class BudgetField(_CompressedChange):
    """{usd, period} from an amount and a period; a blank amount: None (no budget)."""

    widget = BudgetWidget

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", BUDGET_HELP)
        subfields = (forms.CharField(required=False), forms.CharField(required=False))
        super().__init__(subfields, require_all_fields=False, required=False, **kwargs)

    def compress(self, data_list: list[Any]) -> dict[str, Any] | None:
        usd, period = (list(data_list or []) + ["", ""])[:2]
        if not usd:
            return None
        return {"usd": parse_number(usd), "period": period or "month"}


class StructuredLimitsMixin(forms.Form):
    """A model form of an org or agent: `limits` and `budget` as structured fields."""

    limits = LimitsField(label="Limits")
    budget = BudgetField(label="Budget")
