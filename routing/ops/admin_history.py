"""The admin's configuration history: read-only versions with their diffs, and a rollback (docs/config-history.md#admin).

Viewing needs staff and `routing.view_configrevision`; rolling back needs
`routing.rollback_config` as well (ROLLBACK_PERMISSION), asked on a confirmation page
that shows what the rollback would change (a dry run) before the POST does it. Both
call routing.config.history; nothing here decides anything.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from routing.config import history
from routing.config.diff import ADDED, REMOVED, short_value
from routing.models import ConfigRevision
from routing.ops import scope
from routing.ops.admin_base import HIDDEN, ReadOnlyAdmin

ROLLBACK_PERMISSION = "routing.rollback_config"  # ConfigRevision.Meta.permissions


def may_roll_back(user: Any) -> bool:
    """Staff with ROLLBACK_PERMISSION, unless org-scoped: a rollback replaces every org's configuration."""
    return bool(user.is_active and user.is_staff and user.has_perm(ROLLBACK_PERMISSION) and not scope.is_scoped(user))


def diff_rows(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Changes as table rows for the templates: op, path, and old/new printed compactly."""
    rows = []
    for c in changes:
        rows.append(
            {
                "op": c["op"],
                "path": c["path"],
                "old": "" if c["op"] == ADDED else short_value(c.get("old"), 400),
                "new": "" if c["op"] == REMOVED else short_value(c.get("new"), 400),
            }
        )
    return rows


class ConfigRevisionAdmin(ReadOnlyAdmin):
    org_path = HIDDEN  # each version is the whole document, every org's
    list_display = ["version", "created_at", "author", "source", "summary"]
    list_display_links = ["version", "summary"]
    list_filter = ["source", "author"]
    search_fields = ["summary", "author"]
    ordering = ["-version"]
    change_form_template = "admin/routing/configrevision/detail.html"
    actions = ["roll_back_to_selected"]

    def has_rollback_permission(self, request: HttpRequest) -> bool:
        return may_roll_back(request.user)

    @admin.action(description="Roll back to the selected version…", permissions=["rollback"])
    def roll_back_to_selected(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        """The changelist's action: to the same confirmation page as the version's button."""
        chosen = list(queryset.values_list("pk", flat=True)[:2])
        if len(chosen) != 1:
            messages.warning(request, "Select exactly one version to roll back to.")
            return None
        return HttpResponseRedirect(reverse("admin:routing_configrevision_rollback", args=[chosen[0]]))

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("document")

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.rollback_view)
        return [path("<int:pk>/rollback/", view, name="routing_configrevision_rollback"), *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        revision = get_object_or_404(ConfigRevision.objects.defer("document"), pk=object_id)
        newest = ConfigRevision.objects.order_by("-version").values_list("version", flat=True).first()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Configuration version {revision.version}",
            "revision": revision,
            "rows": diff_rows(list(revision.changes or [])),
            "is_newest": revision.version == newest,
            "may_roll_back": may_roll_back(request.user),
            "rollback_url": reverse("admin:routing_configrevision_rollback", args=[revision.pk]),
        }
        return TemplateResponse(request, self.change_form_template, context)

    def rollback_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET: what the rollback would change (a dry run); POST: do it, as a new version."""
        if not may_roll_back(request.user):
            raise PermissionDenied(f"rolling the configuration back needs the {ROLLBACK_PERMISSION} permission")
        revision = get_object_or_404(ConfigRevision.objects.defer("document"), pk=pk)
        author = request.user.get_username()
        if request.method == "POST":
            confirmed = request.POST.get("remove_keys") == "yes"  # the confirmation box, when keys would go
            try:
                result = history.rollback(revision.version, author=author, force=confirmed)
            except history.KeysWouldBeRemoved as exc:
                messages.error(request, f"{exc}. Tick the confirmation box to roll back anyway.")
                return HttpResponseRedirect(request.path)
            except history.HistoryError as exc:
                messages.error(request, str(exc))
                return HttpResponseRedirect(request.path)
            if result.version is None:
                messages.info(request, f"No changes: the configuration already is version {revision.version}'s.")
                return HttpResponseRedirect(reverse("admin:routing_configrevision_changelist"))
            new = ConfigRevision.objects.only("pk").get(version=result.version)
            messages.success(
                request,
                f"Rolled back to version {revision.version}: recorded as version {result.version}; "
                "serving processes reload it now.",
            )
            return HttpResponseRedirect(reverse("admin:routing_configrevision_change", args=[new.pk]))
        error, rows, warnings, removed_keys = None, [], [], 0
        try:
            result = history.rollback(revision.version, author=author, dry_run=True)
            rows, warnings, removed_keys = diff_rows(result.changes), result.warnings, result.removed_keys
        except history.HistoryError as exc:
            error = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Roll back to configuration version {revision.version}?",
            "revision": revision,
            "rows": rows,
            "warnings": warnings,
            "removed_keys": removed_keys,
            "error": error,
        }
        return TemplateResponse(request, "admin/routing/configrevision/rollback.html", context)
