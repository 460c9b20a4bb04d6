"""A key's or agent's form filled within its org's bounds by a user who may not manage the org."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest

from policies.models import Org
from routing.config.document import document_from_db
from routing.ops import scope


class OrgBoundedForm(forms.BaseForm):
    """A key's or agent's form that a user who may not manage its org fills within the org's bounds
    (routing.ops.scope: the management API's org-limited tokens follow the same rule)."""

    actor: Any = None  # the user saving the form, set by the admin's get_form
    bounded: dict[str, str] = {}  # noqa: RUF012 - form field -> the scope rule's field; read, never changed

    def org_of(self, data: dict[str, Any]) -> Org | None:
        raise NotImplementedError

    def check_org_bounds(self, data: dict[str, Any], what: str) -> None:
        org = self.org_of(data)
        if self.actor is None or org is None or scope.may_manage_org(self.actor, org):
            return
        bounds = scope.bounds_of(document_from_db(), org.name)
        if bounds is None:
            return
        changes = {name: data.get(field) for field, name in self.bounded.items() if field in data}
        instance = self.instance  # type: ignore[attr-defined]
        current = {name: getattr(instance, field) for field, name in self.bounded.items()} if instance.pk else {}
        fields = {name: field for field, name in self.bounded.items()}
        for refusal in scope.child_refusals(bounds, changes, current, what):
            field = fields.get(refusal.param)
            self.add_error(field if field in self.fields else None, refusal.message)


def with_actor(form: type[forms.BaseForm], request: HttpRequest) -> type[forms.BaseForm]:
    """The admin's form class for this request (a fresh class per call), knowing who saves it."""
    form.actor = request.user  # type: ignore[attr-defined]
    return form
