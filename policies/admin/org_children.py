"""Agents, policies and BYO credentials on their own admin pages (search across orgs): an edit moves the
entry within its org's list in the document, validated like the org page's inlines."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from policies.admin.bounded import OrgBoundedForm, with_actor
from policies.admin.orgs import Edit, add_child_validators, default_model_widget
from policies.models import Agent, Org, OrgCredential, OrgPolicy
from routing.admin import DocumentCheckedForm
from routing.config.document import child_item
from routing.config.store import find_org
from routing.ops.admin_base import OrgScopedAdmin
from routing.ops.admin_keys import StoredKeyForm
from routing.ops.dashboard.limits import budget_summary
from routing.ops.limit_fields import StructuredLimitsMixin
from routing.ops.model_choices import ChainField


class OrgChildForm(DocumentCheckedForm):
    """An agent, policy or credential edited on its own: moved within the org's list."""

    kind = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_child_validators(self)

    def document_edit(self, obj: Any) -> tuple[Edit, str]:
        model = type(obj)
        old = model.objects.select_related("org").filter(pk=obj.pk).first() if obj.pk else None
        org = obj.org
        if self.kind == "policies":
            label = str(OrgPolicy.objects.filter(org=org).exclude(pk=obj.pk).count())
            old_index = (
                list(
                    OrgPolicy.objects.filter(org=old.org).order_by("priority", "id").values_list("pk", flat=True)
                ).index(old.pk)
                if old
                else None
            )
        item = child_item(self.kind, obj)
        if self.kind != "policies":
            label = item["name" if self.kind == "agents" else "provider"]

        def edit(doc: dict[str, Any]) -> None:
            if old is not None:
                entries = find_org(doc, old.org.name).setdefault(self.kind, [])  # type: ignore[union-attr]
                if self.kind == "policies":
                    entries.pop(old_index)
                else:
                    old_label = old.name if self.kind == "agents" else old.provider.name
                    entries[:] = [
                        e for e in entries if e.get("name" if self.kind == "agents" else "provider") != old_label
                    ]
            find_org(doc, org.name).setdefault(self.kind, []).append(item)  # type: ignore[union-attr]

        return edit, f"orgs[{org.name}].{self.kind}[{label}]"


class AgentForm(StructuredLimitsMixin, OrgBoundedForm, OrgChildForm):
    kind = "agents"
    bounded = {"limits": "limits", "budget": "budget", "priority": "priority", "default_model": "default_model"}  # noqa: RUF012

    class Meta:
        model = Agent
        fields = "__all__"
        widgets = {"default_model": default_model_widget()}

    def org_of(self, data: dict[str, Any]) -> Org | None:
        return data.get("org")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        self.check_org_bounds(data, f"agent '{data.get('name')}'")
        return data


class PolicyForm(OrgChildForm):
    kind = "policies"
    fallback_chain = ChainField()

    class Meta:
        model = OrgPolicy
        fields = "__all__"


class CredentialForm(StoredKeyForm, OrgChildForm):
    kind = "credentials"

    class Meta:
        model = OrgCredential
        fields = "__all__"


@admin.register(Agent)
class AgentAdmin(OrgScopedAdmin):
    org_path, scoped_may_edit = "org__name", True  # within the org's bounds (OrgBoundedForm)
    form = AgentForm
    autocomplete_fields = ["org"]
    list_display = ["name", "org", "default_model", "active_keys"]
    list_filter = ["org"]
    search_fields = ["name", "org__name", "default_model"]
    list_select_related = ["org"]
    readonly_fields = ["budget_spend"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        return with_actor(super().get_form(request, obj, change, **kwargs), request)

    @admin.display(description="budget spend")
    def budget_spend(self, obj: Agent) -> str:
        return budget_summary(("agent", obj.org.name, obj.name), obj.budget) if obj.pk else "no budget"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        from django.db.models import Q

        return super().get_queryset(request).annotate(_keys=Count("keys", filter=Q(keys__revoked=False)))

    @admin.display(description="active keys", ordering="_keys")
    def active_keys(self, obj: Agent) -> int:
        return obj._keys  # type: ignore[attr-defined]


@admin.register(OrgPolicy)
class OrgPolicyAdmin(OrgScopedAdmin):
    org_path = "org__name"  # the org's own policies: an org-scoped operator views them
    form = PolicyForm
    autocomplete_fields = ["org"]
    list_display = ["org", "priority", "pattern", "action", "fallback_chain"]
    list_filter = ["org", "action"]
    search_fields = ["pattern", "org__name"]
    list_select_related = ["org"]


@admin.register(OrgCredential)
class OrgCredentialAdmin(OrgScopedAdmin):
    org_path = "org__name"
    form = CredentialForm
    autocomplete_fields = ["org", "provider"]
    list_display = ["org", "provider", "api_key_env", "base_url"]
    list_filter = ["org", "provider"]
    search_fields = ["org__name", "provider__name"]
    list_select_related = ["org", "provider"]
