"""Admin base classes shared by the admin modules.

`OrgScopedAdmin` is the one way the admin narrows itself to an org-scoped operator's orgs
(routing.ops.scope.visible_orgs; docs/operations.md#org-scoped-staff): every ModelAdmin of
policies, providers and routing derives from it and says how its model reaches an org
(`org_path`). One that says nothing is hidden from scoped operators, so a new admin fails closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import QuerySet
from django.http import HttpRequest

from routing.ops import scope

GLOBAL = None  # org_path of global configuration (providers, models, aliases): scoped operators view it only
HIDDEN = "-"  # org_path of a model that names every org (history, operator scopes): scoped operators never see it
_ORGS = "_switchboard_visible_orgs"  # the request's cached answer of scope.visible_orgs


def request_orgs(request: HttpRequest) -> frozenset[str] | None:
    """scope.visible_orgs of the request's user, asked once per request."""
    if not hasattr(request, _ORGS):
        setattr(request, _ORGS, scope.visible_orgs(request.user))
    return getattr(request, _ORGS)


class OrgScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin that shows an org-scoped operator its orgs' rows only and lets it change them only where
    `scoped_may_edit` (an org's keys and agents, within the org's bounds: routing.ops.scope)."""

    org_path: str | None = HIDDEN  # lookup from the model to its org's name; GLOBAL or HIDDEN
    scoped_may_edit = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        orgs = request_orgs(request)
        if orgs is None or self.org_path is GLOBAL:
            return qs
        return qs.none() if self.org_path == HIDDEN else scope.within(qs, self.org_path, orgs)

    def _scoped_sees(self, request: HttpRequest) -> bool:
        return request_orgs(request) is None or self.org_path != HIDDEN

    def _scoped_edits(self, request: HttpRequest) -> bool:
        return request_orgs(request) is None or (self.scoped_may_edit and self.org_path not in (GLOBAL, HIDDEN))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._scoped_sees(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._scoped_sees(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._scoped_edits(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._scoped_edits(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._scoped_edits(request) and super().has_delete_permission(request, obj)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """A choice of a related org-bound row (an agent's org, a key's agent) offers the user's orgs' rows only."""
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        related = self.admin_site._registry.get(db_field.remote_field.model)
        if field is not None and isinstance(related, OrgScopedAdmin) and hasattr(field, "queryset"):
            orgs = request_orgs(request)
            path = related.org_path
            if orgs is not None and path is not GLOBAL:
                field.queryset = field.queryset.none() if path == HIDDEN else scope.within(field.queryset, path, orgs)
        return field

    def get_list_filter(self, request: HttpRequest) -> Sequence[Any]:
        """A scoped operator's related-object filters list the related rows its rows use, not every org's."""
        filters = super().get_list_filter(request)
        if request_orgs(request) is None:
            return filters
        return [_related_only(self.model, f) for f in filters]


def _related_only(model: Any, spec: Any) -> Any:
    if not isinstance(spec, str):
        return spec
    if get_fields_from_path(model, spec)[-1].is_relation:
        return (spec, admin.RelatedOnlyFieldListFilter)
    return spec


class ReadOnlyAdmin(OrgScopedAdmin):
    """Records written by the gateway itself (usage, audit, history): listed and viewed, never edited here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
