"""Build admin POST data from what the change/add page renders, like a browser would."""

from __future__ import annotations

import html
from typing import Any

from django.forms import MultiWidget, Textarea

from routing.ops.admin_widgets import PriceRowsWidget


def page_data(response: Any) -> dict[str, Any]:
    """The POST body a browser would send for the rendered form, untouched."""
    data: dict[str, Any] = {}

    def add(form: Any) -> None:
        for bound in form:
            widget = bound.field.widget
            if isinstance(widget, MultiWidget):  # one input per part, as the browser renders them
                value = bound.value()
                for i, part in enumerate(value if bound.form.is_bound else widget.decompress(value)):
                    if part not in (None, [], ""):
                        data[f"{bound.html_name}{widget.widgets_names[i]}"] = part
                continue
            value = bound.value()
            if isinstance(widget, PriceRowsWidget):  # one input per cell of each row, as rendered
                rows = widget.get_context(bound.html_name, value, {})["widget"]["rows"]
                for i, row in enumerate(rows):
                    data.update({f"{bound.html_name}-{i}-{key}": cell for key, cell in row})
                continue
            if isinstance(widget, Textarea) and not isinstance(value, str):  # a list or mapping as its text
                value = widget.format_value(value)
            if value is None or value is False:
                continue
            data[bound.html_name] = "on" if value is True else value

    add(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for bound in formset.management_form:
            data[bound.html_name] = bound.value()
        for form in formset.forms:
            add(form)
    return data


def set_rows(data: dict[str, Any], prefix: str, rows: list[dict[str, Any]]) -> None:
    """Replace an inline's rows: existing forms are kept (so their ids post), extra ones added."""
    initial = int(data[f"{prefix}-INITIAL_FORMS"])
    for key in [
        k
        for k in data
        if k.startswith(f"{prefix}-")
        and "FORMS" not in k
        and k.split("-")[1].isdigit()
        and int(k.split("-")[1]) >= initial
    ]:
        del data[key]
    for i, row in enumerate(rows):
        for field, value in row.items():
            data[f"{prefix}-{i}-{field}"] = value
    data[f"{prefix}-TOTAL_FORMS"] = str(max(len(rows), initial))


def text(response: Any) -> str:
    return html.unescape(response.content.decode())
