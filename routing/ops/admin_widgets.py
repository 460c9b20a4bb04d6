"""Admin fields for the lists and small mappings operators type, instead of raw JSON boxes
(docs/operations.md#admin-fields).

- `PatternListField`: model ids or Go glob patterns (`chat-*`), one per line or comma separated;
  blank is the field's "none given" value (a key's Models: None, every model its org allows);
- `KeyValueField`: a free-form mapping as `key=value` lines (a key's metadata);
- `SettingsField`: a small mapping of numbers (and yes/no) as labelled boxes (a model's
  concurrency, hedge, affinity); all blank: None;
- `PriceVersionsField`: dated prices as table rows, one column per token class, with their
  currency; a row left blank is dropped, one blank row is always offered;
- `NextPositionFormSet`: an inline whose new rows start at the next position, not 0;
- `SkipsUnchangedSave`: an admin whose unchanged form saves nothing (no version bump, no reload).

Like routing.ops.limit_fields, the fields only assemble the value the configuration document
holds and never judge it: a number that does not parse is passed on as typed, so the one
validation (routing.config.validation, run by the admin's document-checked forms and by
policies.keys.check_controls) refuses it with the message an import gives, next to the field.
A value posted as JSON text under the field's own name (scripts, older forms) is still read.
A value saved unchanged is kept exactly as stored (same key order, same number types), so
opening a page and saving it changes nothing in the configuration document.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from django import forms
from django.forms.models import BaseInlineFormSet

from routing.core.prices import PRICE_KEYS
from routing.ops.limit_fields import LabelledMultiWidget, parse_number

_SEPARATORS = re.compile(r"[\n,]")
MAX_PRICE_ROWS = 100  # rows read back from one post; a model has a handful of dated prices


def _canonical(value: Any) -> bytes:
    """A value as sorted JSON: 1 and 1.0, True and 1, differ; key order does not."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


def _json(text: str) -> tuple[bool, Any]:
    try:
        return True, orjson.loads(text)
    except orjson.JSONDecodeError:
        return False, None


class KeepsStoredValue(forms.Field):
    """A field whose value, when it equals the stored one, is the stored object itself (its key
    order and number types), so an unchanged save writes the document byte for byte as it was.

    The model's JSONField hands its form field JSON's options; these fields read text of their own, and
    blank is a value of theirs (none, off, empty), so they are never required."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for unused in ("encoder", "decoder", "max_length"):
            kwargs.pop(unused, None)
        kwargs["required"] = False
        super().__init__(*args, **kwargs)

    def _clean_bound_field(self, bf: forms.BoundField) -> Any:  # Django's hook (5.0+) that sees the initial value
        value = super()._clean_bound_field(bf)
        initial = bf.initial
        return initial if initial is not None and _canonical(value) == _canonical(initial) else value

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return _canonical(self.to_python(data)) != _canonical(initial)
        except forms.ValidationError:
            return True

    def prepare_value(self, value: Any) -> Any:
        return value


# Lists of patterns ------------------------------------------------------------------------


class PatternListInput(forms.Textarea):
    """One item per line; [] (an empty list, distinct from blank) written as `[]`. With `wrap`, the list
    is the one key of a mapping (an e-mail destination's `to`)."""

    def __init__(self, placeholder: str = "", wrap: str | None = None) -> None:
        super().__init__(attrs={"rows": 3, "cols": 40, "placeholder": placeholder, "class": "sb-list"})
        self.wrap = wrap

    def format_value(self, value: Any) -> str:
        if self.wrap and isinstance(value, dict) and list(value) == [self.wrap]:
            value = value[self.wrap]
        if value is None:
            return ""
        if isinstance(value, list):
            return "\n".join(str(item) for item in value) if value else "[]"
        return str(value)


def split_list(text: str) -> list[str]:
    """`chat-*, gpt-4o` or one per line -> ["chat-*", "gpt-4o"]; a JSON list of strings as it is."""
    text = text.strip()
    if text.startswith("["):  # a JSON list, or a pattern starting with a character class ([ab]-*)
        ok, parsed = _json(text)
        if ok and isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            return parsed
    return [item.strip() for item in _SEPARATORS.split(text) if item.strip()]


class PatternListField(KeepsStoredValue):
    """A list of model ids or patterns (or `numbers`, or e-mail addresses under `wrap`) typed as text;
    blank gives `empty_value`."""

    def __init__(
        self,
        *,
        empty_value: Any = None,
        placeholder: str = "chat-*",
        numbers: bool = False,
        wrap: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("widget", PatternListInput(placeholder, wrap))
        self.empty_value, self.numbers, self.wrap = empty_value, numbers, wrap
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if not isinstance(value, str):
            return self.empty_value if value is None else value  # a stored value
        text = value.strip()
        if not text or text == "null":  # null: JSON for "none given"
            return self.empty_value
        ok, parsed = _json(text) if text[0] in "[{" else (False, None)
        if ok and (isinstance(parsed, dict) if self.wrap else self.numbers and isinstance(parsed, list)):
            return parsed  # the whole value as JSON (a script, an older form)
        items: list[Any] = split_list(text)
        if self.numbers:
            items = [parse_number(item) for item in items]
        return {self.wrap: items} if self.wrap else items


class ChoiceBoxes(forms.CheckboxSelectMultiple):
    """A checkbox per choice; a whole list posted as JSON text (a script, an older form) is read too."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        values = super().value_from_datadict(data, files, name)
        if isinstance(values, list) and len(values) == 1 and str(values[0]).lstrip().startswith("["):
            ok, parsed = _json(values[0])
            if ok and isinstance(parsed, list):
                return [str(v) for v in parsed]
        return values


def choice_boxes(choices: tuple[str, ...] | list[str]) -> forms.MultipleChoiceField:
    return forms.MultipleChoiceField(choices=[(c, c) for c in choices], widget=ChoiceBoxes, required=False)


# Free-form key=value ----------------------------------------------------------------------


def _value_text(value: Any) -> str:
    """A value as it is typed after `key=`: text as it is, unless it would read back as something else."""
    if isinstance(value, str) and value == value.strip() and "\n" not in value and not _json(value)[0]:
        return value
    return orjson.dumps(value).decode()


def key_value_text(value: Any) -> str:
    """A mapping as `key=value` lines; one whose keys cannot be written so, as a JSON object."""
    if not value:
        return ""
    if not isinstance(value, dict) or any(
        not isinstance(k, str) or not k.strip() or k != k.strip() or "=" in k or "\n" in k for k in value
    ):
        return orjson.dumps(value).decode()
    return "\n".join(f"{k}={_value_text(v)}" for k, v in value.items())


def parse_key_values(text: str) -> dict[str, Any]:
    """`team=search` lines -> {"team": "search"}; a value that reads as JSON (42, true, "42", [1]) is
    that JSON value, anything else is text. A JSON object ({...}) is read as it is."""
    text = text.strip()
    if text.startswith("{"):
        ok, parsed = _json(text)
        if ok and isinstance(parsed, dict):
            return parsed
    found: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, equals, raw = line.partition("=")
        key, raw = key.strip(), raw.strip()
        if not equals or not key:
            raise forms.ValidationError(f"line {number} ({line.strip()!r}) is not key=value: write e.g. team=search")
        if key in found:
            raise forms.ValidationError(f"line {number} repeats the key {key!r}: keep one")
        ok, parsed = _json(raw)
        found[key] = parsed if ok else raw
    return found


class KeyValueInput(forms.Textarea):
    def __init__(self) -> None:
        super().__init__(attrs={"rows": 3, "cols": 40, "placeholder": "team=search\ncost_centre=42", "class": "sb-kv"})

    def format_value(self, value: Any) -> str:
        return value if isinstance(value, str) else key_value_text(value)


class KeyValueField(KeepsStoredValue):
    """A free-form mapping typed as `key=value` lines; blank: {}."""

    widget = KeyValueInput

    def to_python(self, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        return parse_key_values(str(value)) if value is not None and str(value).strip() else {}


# A few labelled settings -----------------------------------------------------------------

YES_NO = [("", "default (no)"), ("false", "no"), ("true", "yes")]


class SettingsWidget(LabelledMultiWidget):
    """One box per setting: a number, or a yes/no choice for the keys named in `flags`."""

    def __init__(
        self, keys: tuple[str, ...], labels: tuple[str, ...], flags: tuple[str, ...] = (), texts: tuple[str, ...] = ()
    ) -> None:
        self.keys, self.labels, self.flags = keys, labels, flags
        super().__init__({key: _box(key, flags, texts) for key in keys})

    def decompress(self, value: Any) -> list[Any]:
        value = value if isinstance(value, dict) else {}
        return [_flag_text(value.get(key)) if key in self.flags else value.get(key) for key in self.keys]

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        if name in data:  # the whole mapping as JSON text under the field's own name
            return data.get(name)
        return super().value_from_datadict(data, files, name)

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        if isinstance(value, str):  # posted as JSON text: shown in the boxes
            ok, parsed = _json(value)
            value = parsed if ok else None
        return super().get_context(name, value, attrs)


def _box(key: str, flags: tuple[str, ...], texts: tuple[str, ...]) -> forms.Widget:
    if key in flags:
        return forms.Select(choices=YES_NO)
    if key in texts:
        return forms.TextInput(attrs={"placeholder": "none", "size": 40, "class": "sb-text"})
    return forms.NumberInput(attrs={"placeholder": "none", "step": "any", "style": "width: 7em"})


def _flag_text(value: Any) -> str:
    return (
        {True: "true", False: "false"}.get(value, "") if isinstance(value, bool) else ("" if value is None else value)
    )


class SettingsField(KeepsStoredValue, forms.MultiValueField):
    """A small settings mapping ({initial, min, max, queue}, {budget_pct, tools}) from labelled boxes;
    all blank: None (the feature is off)."""

    def __init__(
        self,
        keys: tuple[str, ...],
        labels: tuple[str, ...],
        flags: tuple[str, ...] = (),
        texts: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        self.keys, self.flags, self.texts = keys, flags, texts
        subfields = tuple(forms.CharField(required=False) for _ in keys)
        kwargs["widget"] = SettingsWidget(keys, labels, flags, texts)
        super().__init__(subfields, require_all_fields=False, required=False, **kwargs)

    def compress(self, data_list: list[Any]) -> dict[str, Any] | None:
        values = {}
        for key, text in zip(self.keys, data_list or [], strict=False):
            if text in (None, ""):
                continue
            if key in self.flags:
                values[key] = {"true": True, "false": False}.get(text, text)
            else:
                values[key] = text if key in self.texts else parse_number(text)
        return values or None

    def to_python(self, value: Any) -> Any:
        if isinstance(value, list):  # the boxes as posted
            return self.compress(value)
        if isinstance(value, str):  # the whole mapping as JSON text (a script, an older form)
            ok, parsed = _json(value) if value.strip() else (True, None)
            if not ok:
                raise forms.ValidationError(f"Fill in the boxes, or post the {self.label or 'value'} as a JSON object.")
            return parsed
        return value

    def clean(self, value: Any) -> Any:
        if not isinstance(value, list):
            return self.to_python(value)
        return super().clean(value)


# Dated prices as rows ---------------------------------------------------------------------

PRICE_COLUMNS = ("effective_from", *PRICE_KEYS)
CURRENCY = "USD"


class PriceRowsWidget(forms.Widget):
    """A table: one row per dated price entry plus a blank row to add one; inputs `name-<row>-<key>`."""

    template_name = "routing/widgets/price_rows.html"

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        if name in data:  # the whole list as JSON text (a script, an older form)
            return data.get(name)
        rows = []
        for row in range(MAX_PRICE_ROWS):
            if not any(f"{name}-{row}-{key}" in data for key in PRICE_COLUMNS):
                break
            rows.append({key: (data.get(f"{name}-{row}-{key}") or "").strip() for key in PRICE_COLUMNS})
        return rows

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data and f"{name}-0-effective_from" not in data

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        if isinstance(value, str):
            ok, value = _json(value)
            value = value if ok else []
        entries = [e for e in value or [] if isinstance(e, dict)]
        rows = [[(key, _cell(entry.get(key))) for key in PRICE_COLUMNS] for entry in [*entries, {}]]
        context["widget"].update(
            {
                "rows": rows,
                "headings": [key.replace("_", " ") for key in PRICE_COLUMNS],
                "currency": CURRENCY,
                "input_type": "date",
            }
        )
        return context


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


class PriceVersionsField(KeepsStoredValue):
    """A model's dated prices ([{effective_from, input, output, ...}]) typed as table rows."""

    widget = PriceRowsWidget

    def to_python(self, value: Any) -> Any:
        if value in (None, ""):
            return []
        if isinstance(value, str):
            ok, parsed = _json(value)
            if not ok:
                raise forms.ValidationError("Write the dated prices in the rows of the table.")
            return [] if parsed is None else parsed  # null: no dated prices, as blank rows
        return [_entry(row) for row in value if any(_cell(v).strip() for v in row.values())]


def _entry(row: dict[str, Any]) -> dict[str, Any]:
    """A posted row as a price entry: the date as typed, numbers parsed (text left for the validation)."""
    if not all(isinstance(v, str) for v in row.values()):
        return row  # an entry already (the stored value)
    entry: dict[str, Any] = {}
    for key, text in row.items():
        if text:
            entry[key] = text if key == "effective_from" else parse_number(text)
    return entry


# Inline rows at the next position ------------------------------------------------------------


class NextPositionFormSet(BaseInlineFormSet):
    """An inline of ordered rows (`position`) whose new rows start after the last saved one, so a row
    added without touching its position goes to the end of the list instead of to the front."""

    def _next_position(self) -> int:
        if not hasattr(self, "_next"):
            positions = [getattr(obj, "position", 0) or 0 for obj in self.get_queryset()]
            self._next = max(positions) + 1 if positions else 0
        return self._next

    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        kwargs = super().get_form_kwargs(index)
        initial_count = self.initial_form_count()
        if index is None or index >= initial_count:
            offset = (self.total_form_count() if index is None else index) - initial_count
            kwargs["initial"] = {**kwargs.get("initial", {}), "position": self._next_position() + max(offset, 0)}
        return kwargs


class SkipsUnchangedSave:
    """An admin whose change page, saved with nothing changed, writes nothing: no configuration version
    bump and so no snapshot reload in every process (an inline's unchanged rows are never saved either)."""

    def save_model(self, request: Any, obj: Any, form: forms.ModelForm, change: bool) -> None:
        if change and not form.has_changed():
            return
        super().save_model(request, obj, form, change)  # type: ignore[misc]
