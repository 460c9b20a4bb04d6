"""Choosing model ids in the admin: a search box, not free text or one <select> of every model.

An agent's default model (a model id or an alias) and a policy's fallback chain (model
ids, in order) are picked with the admin's select2 autocomplete, fed by
`model_choices_view` (a page of ids matching what was typed). A fallback chain keeps
the document's three meanings distinguishable (docs/operations.md#admin-model-choices):

- "keep the model's chain"  -> null (the column is NULL, the key is absent),
- "no fallback"             -> [] (the model's own chain is disabled),
- "these models, in order"  -> ["chat-b", ...].
"""

from __future__ import annotations

from typing import Any

import orjson
from django import forms
from django.contrib.admin.widgets import AutocompleteMixin, get_select2_language
from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from providers.models import Alias, Model
from routing.config.schema import MAX_CHAIN

PAGE = 20
URL_NAME = "admin:switchboard_model_choices"

INHERIT, NONE, CHAIN = "inherit", "none", "chain"
MODES = [(INHERIT, "keep the model's chain"), (NONE, "no fallback"), (CHAIN, "these models, in order:")]


def model_choices(term: str, page: int = 1, aliases: bool = True) -> tuple[list[dict[str, str]], bool]:
    """Model ids (and alias names) containing `term`, one page in name order, and whether more follow."""

    term = term.strip()
    start = (max(page, 1) - 1) * PAGE
    found = [
        {"id": public_id, "text": public_id}
        for public_id in Model.objects.filter(public_id__icontains=term)
        .order_by("public_id")
        .values_list("public_id", flat=True)[start : start + PAGE + 1]
    ]
    if aliases and len(found) <= PAGE:
        models_before = Model.objects.filter(public_id__icontains=term).count()
        alias_start = max(0, start - models_before)
        rows = (
            Alias.objects.filter(name__icontains=term)
            .order_by("name")
            .values_list("name", "target__public_id")[alias_start : alias_start + PAGE + 1 - len(found)]
        )
        found += [{"id": name, "text": f"{name} (alias of {target})"} for name, target in rows]
    return found[:PAGE], len(found) > PAGE


def model_choices_view(request: HttpRequest) -> JsonResponse:
    """select2's JSON: ?term=&page=&aliases=0|1 (wrapped in admin_view: staff only)."""
    try:
        page = int(request.GET.get("page") or 1)
    except ValueError:
        page = 1
    results, more = model_choices(request.GET.get("term", ""), page, aliases=request.GET.get("aliases", "1") != "0")
    return JsonResponse({"results": results, "pagination": {"more": more}})


class ModelIdSelect(AutocompleteMixin, forms.Select):
    """A select2 search over model ids (and aliases), rendering only the current value(s)."""

    def __init__(self, aliases: bool = True, attrs: dict[str, Any] | None = None, placeholder: str = "") -> None:
        self.aliases = aliases
        self.placeholder = placeholder
        self.attrs = {} if attrs is None else attrs.copy()
        self.choices = []
        self.db = None
        self.i18n_name = get_select2_language()

    def get_url(self) -> str:
        return reverse(URL_NAME) + ("" if self.aliases else "?aliases=0")

    def build_attrs(self, base_attrs: dict[str, Any], extra_attrs: dict[str, Any] | None = None) -> dict[str, Any]:
        attrs = forms.Select.build_attrs(self, base_attrs, extra_attrs)
        css = attrs.get("class", "")
        attrs.update(
            {
                "data-ajax--cache": "true",
                "data-ajax--delay": 250,
                "data-ajax--type": "GET",
                "data-ajax--url": self.get_url(),
                "data-theme": "admin-autocomplete",
                "data-allow-clear": "true",
                "data-placeholder": self.placeholder,
                "data-width": "20em",
                "lang": self.i18n_name,
                "class": (css + " " if css else "") + "admin-autocomplete",
            }
        )
        return attrs

    def optgroups(self, name: str, value: list[Any], attrs: dict[str, Any] | None = None) -> list[Any]:
        """The current values as selected options, in their order (select2 appends new picks)."""
        options = [] if self.allow_multiple_selected else [self.create_option(name, "", "", False, 0)]
        for v in value:
            if v not in (None, ""):
                options.append(self.create_option(name, v, v, True, len(options)))
        return [(None, options, 0)]


class ModelIdMultiSelect(ModelIdSelect):
    """Several model ids, kept in the order they were picked."""

    allow_multiple_selected = True

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        getter = getattr(data, "getlist", None)
        return getter(name) if getter is not None else data.get(name)

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return False  # an empty multi-select sends nothing


class _IdList(forms.Field):
    def to_python(self, value: Any) -> list[str]:
        if value in (None, ""):
            return []
        if isinstance(value, str):
            value = value.split(",")
        return [str(v).strip() for v in value if str(v).strip()]


class _Parts(tuple):
    """(mode, ids): a chain split for the two boxes, never mistaken for a chain of two ids."""

    __slots__ = ()


class ChainWidget(forms.MultiWidget):
    template_name = "django/forms/widgets/multiwidget.html"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__([forms.Select(choices=MODES), ModelIdMultiSelect(aliases=False)], attrs)

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[Any]:
        """The two boxes; or, for scripted posts, the whole chain under the field's own name
        as JSON (`null`, `[]`, `["chat-b"]`) or comma-separated ids."""
        if name not in data:
            return super().value_from_datadict(data, files, name)
        getter = getattr(data, "getlist", None)
        raw = getter(name) if getter is not None else data.get(name)
        if isinstance(raw, list) and len(raw) == 1:
            raw = raw[0]
        if isinstance(raw, str):
            text = raw.strip()
            if text in ("", "null"):
                return _Parts((INHERIT, []))
            try:
                raw = orjson.loads(text)
            except orjson.JSONDecodeError:
                raw = text
            if raw is None:
                return _Parts((INHERIT, []))
        return self.decompress(raw)

    def decompress(self, value: Any) -> _Parts:
        if isinstance(value, _Parts):
            return value
        if value is None:
            return _Parts((INHERIT, []))
        if isinstance(value, str):
            return _Parts((CHAIN, _IdList().to_python(value)))
        return _Parts((CHAIN if value else NONE, list(value)))


def _posted_parts(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and value[0] in (None, "", INHERIT, NONE, CHAIN)
        and isinstance(value[1], (list, tuple))
    )


class ChainField(forms.MultiValueField):
    """A policy's fallback chain: null (keep the model's), [] (no fallback), or ordered model ids."""

    widget = ChainWidget

    def __init__(self, **kwargs: Any) -> None:
        for unused in ("encoder", "decoder", "max_length"):
            kwargs.pop(unused, None)
        kwargs.setdefault(
            "help_text",
            f"Allow policies only: up to {MAX_CHAIN} model ids tried in order instead of the model's chain.",
        )
        super().__init__(
            fields=[forms.ChoiceField(choices=MODES, required=False), _IdList(required=False)],
            require_all_fields=False,
            required=False,
            **kwargs,
        )

    def prepare_value(self, value: Any) -> _Parts:
        """A chain (None or a list of ids, from the model) or the posted parts, as the boxes' parts."""
        if isinstance(value, _Parts):
            return value
        if _posted_parts(value):  # [mode, ids] from the two boxes
            return _Parts((value[0] or INHERIT, _IdList().to_python(value[1])))
        return self.widget.decompress(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.compress(list(self.prepare_value(data))) != initial
        except forms.ValidationError:
            return True

    def compress(self, data_list: list[Any]) -> list[str] | None:
        if not data_list:
            return None
        mode, ids = data_list[0] or INHERIT, data_list[1] if len(data_list) > 1 else []
        if mode == INHERIT:
            return None
        if mode == NONE:
            return []
        if not ids:
            raise forms.ValidationError(
                'Pick at least one model for the chain, or choose "no fallback" or "keep the model\'s chain".'
            )
        return list(dict.fromkeys(ids))  # in order, each once
