"""Who operates the gateway: management tokens (superusers only, shown once), operator scopes, and the
User and Group admins hidden from org-scoped operators."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from policies.admin.shown_once import secret_shown_once
from policies.models import ManagementToken, OperatorScope
from policies.tokens import create_management_token
from routing.ops.admin_base import HIDDEN, OrgScopedAdmin

NEW_TOKEN_SESSION = "switchboard_new_management_token"


@admin.register(ManagementToken)
class ManagementTokenAdmin(OrgScopedAdmin):
    """Management API tokens (docs/management-api.md#tokens): superusers only; shown once, like API keys."""

    org_path = "org__name"

    list_display = ["name", "prefix_display", "scope", "org", "bodies", "created_at", "expires_at", "revoked"]
    list_filter = ["scope", "revoked"]
    actions = ["revoke_tokens"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_view_permission  # type: ignore[assignment]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: ManagementToken | None = None) -> list[str]:
        if obj is None:
            return ["name", "scope", "org", "bodies", "expires_at"]
        return ["name", "prefix", "scope", "org", "bodies", "created_at", "expires_at", "revoked"]

    def get_readonly_fields(self, request: HttpRequest, obj: ManagementToken | None = None) -> list[str]:
        return [] if obj is None else ["name", "prefix", "scope", "org", "bodies", "created_at"]

    @admin.display(description="token", ordering="prefix")
    def prefix_display(self, obj: ManagementToken) -> str:
        return f"{obj.prefix}…"

    def get_urls(self) -> list[Any]:
        from django.urls import path

        view = self.admin_site.admin_view(self.created_view)
        return [path("<int:pk>/created/", view, name="policies_managementtoken_created"), *super().get_urls()]

    def save_model(self, request: HttpRequest, obj: ManagementToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, plaintext = create_management_token(
            name=obj.name, scope=obj.scope, org=obj.org, bodies=obj.bodies, expires_at=obj.expires_at
        )
        obj.pk, obj.prefix, obj.token_hash, obj.created_at = token.pk, token.prefix, token.token_hash, token.created_at
        obj._state.adding = False
        request.session[NEW_TOKEN_SESSION] = {"pk": token.pk, "plaintext": plaintext}

    def response_add(self, request: HttpRequest, obj: ManagementToken, post_url_continue: str | None = None) -> Any:
        if NEW_TOKEN_SESSION not in request.session:
            return super().response_add(request, obj, post_url_continue)
        return HttpResponseRedirect(reverse("admin:policies_managementtoken_created", args=[obj.pk]))

    def created_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Show the new token once: it leaves the session as it is rendered."""
        if not self.has_module_permission(request):
            raise PermissionDenied
        token = get_object_or_404(ManagementToken.objects.select_related("org"), pk=pk)
        return secret_shown_once(
            self,
            request,
            token,
            NEW_TOKEN_SESSION,
            "Management token",
            "token",
            "admin/policies/managementtoken/token_created.html",
        )

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ManagementToken]) -> None:
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {count} token(s); the management API refuses them now.", messages.SUCCESS)


@admin.register(OperatorScope)
class OperatorScopeAdmin(OrgScopedAdmin):
    """Which orgs a staff user is limited to (docs/operations.md#org-scoped-staff): superusers only, since
    the scope is what keeps an operator out of the other orgs."""

    org_path = HIDDEN
    list_display = ["user", "org_names"]
    search_fields = ["user__username", "orgs__name"]
    autocomplete_fields = ["user"]
    filter_horizontal = ["orgs"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission  # type: ignore[assignment]

    def get_queryset(self, request: HttpRequest) -> QuerySet[OperatorScope]:
        return super().get_queryset(request).select_related("user").prefetch_related("orgs")

    @admin.display(description="orgs")
    def org_names(self, obj: OperatorScope) -> str:
        return ", ".join(sorted(o.name for o in obj.orgs.all())) or "none (sees no org)"


# Users and groups name every org's operators, and a user's page could widen its own scope's permissions:
# hidden from org-scoped operators whatever auth permissions they hold.
class ScopedUserAdmin(OrgScopedAdmin, UserAdmin):
    org_path = HIDDEN


class ScopedGroupAdmin(OrgScopedAdmin, GroupAdmin):
    org_path = HIDDEN


admin.site.unregister(User)
admin.site.register(User, ScopedUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, ScopedGroupAdmin)
