"""The org admin: an org with its agents, policies and BYO credentials as inlines, each list validated
as a whole by the one configuration validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from policies.models import Agent, Org, OrgCredential, OrgPolicy
from routing.admin import DocumentCheckedForm, DocumentCheckedFormSet, edited_copy
from routing.config.document import child_item
from routing.config.schema import AGENT, CREDENTIAL, ORG, POLICY
from routing.config.store import find_org
from routing.config.validation import add_form_validators
from routing.ops.admin_base import OrgScopedAdmin
from routing.ops.admin_keys import StoredKeyForm
from routing.ops.dashboard.limits import budget_summary
from routing.ops.limit_fields import StructuredLimitsMixin
from routing.ops.model_choices import ChainField, ModelIdSelect, model_choices_view

Edit = Callable[[dict[str, Any]], None]


def add_child_validators(form: forms.BaseForm) -> None:
    """Field validators shared by inline and standalone forms of org children."""
    add_form_validators(form, AGENT, POLICY, CREDENTIAL)


def _org_entry(doc: dict[str, Any], old_name: str | None, org: Org) -> dict[str, Any]:
    """The org's entry in a document copy, renamed/updated to the edited org (added if new)."""
    entry = find_org(doc, old_name)
    if entry is None:
        entry = {"name": org.name}
        doc["orgs"].append(entry)
    for f in ORG.columns:  # name, default_action, limits: what the form edits, as the document has it
        entry.pop(f.name, None)
    entry.update(ORG.serialise({f.attr: getattr(org, f.attr) for f in ORG.columns}))
    return entry


def _old_org_name(pk: int | None) -> str | None:
    return None if pk is None else Org.objects.filter(pk=pk).values_list("name", flat=True).first()


class OrgForm(StructuredLimitsMixin, DocumentCheckedForm):
    skip_keys = ("agents", "policies", "credentials")  # validated by the inline formsets

    class Meta:
        model = Org
        fields = "__all__"

    def document_edit(self, obj: Org) -> tuple[Edit, str]:
        old = _old_org_name(obj.pk)

        def edit(doc: dict[str, Any]) -> None:
            _org_entry(doc, old, obj)

        return edit, f"orgs[{obj.name}]"


class OrgChildFormSet(DocumentCheckedFormSet):
    """One of an org's lists (agents, policies, credentials), validated as a whole."""

    kind = ""

    def add_fields(self, form: forms.BaseForm, index: int | None) -> None:
        super().add_fields(form, index)
        add_child_validators(form)

    def label(self, index: int, form: forms.ModelForm) -> str:
        if self.kind == "policies":
            return str(index)
        if self.kind == "agents":
            return form.cleaned_data["name"]
        return form.cleaned_data["provider"].name

    def document_edit(self, kept: list[forms.ModelForm]) -> Any:
        org = self.instance
        if not org.name:
            return None
        old = _old_org_name(org.pk)
        items = [child_item(self.kind, edited_copy(f)) for f in kept]

        def edit(doc: dict[str, Any]) -> None:
            _org_entry(doc, old, org)[self.kind] = items

        return edit, f"orgs[{org.name}].{self.kind}", self.label


class AgentFormSet(OrgChildFormSet):
    kind = "agents"


class PolicyFormSet(OrgChildFormSet):
    kind = "policies"


class CredentialFormSet(OrgChildFormSet):
    kind = "credentials"


class OrgChildInline(admin.TabularInline):
    """An org's rows with their org (and provider) joined: one query for the whole list,
    not one per row for its title."""

    related: tuple[str, ...] = ("org",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).select_related(*self.related)


def default_model_widget() -> ModelIdSelect:
    return ModelIdSelect(aliases=True, placeholder="none: requests must name a model")


class AgentInlineForm(StructuredLimitsMixin, forms.ModelForm):
    class Meta:
        model = Agent
        fields = "__all__"


class AgentInline(OrgChildInline):
    model = Agent
    form = AgentInlineForm
    formset = AgentFormSet
    fields = ["name", "default_model", "limits", "budget", "priority", "side_effects"]
    extra = 0

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "default_model":
            kwargs["widget"] = default_model_widget()
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class PolicyInline(OrgChildInline):
    model = OrgPolicy
    formset = PolicyFormSet
    fields = ["priority", "pattern", "action", "fallback_chain"]
    ordering = ["priority", "id"]
    extra = 0

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "fallback_chain":
            return ChainField(label=db_field.verbose_name)
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class CredentialInlineForm(StoredKeyForm, forms.ModelForm):
    class Meta:
        model = OrgCredential
        fields = "__all__"


class CredentialInline(OrgChildInline):
    model = OrgCredential
    form = CredentialInlineForm
    formset = CredentialFormSet
    related = ("org", "provider")
    fields = ["provider", "api_key_env", "api_key", "clear_api_key", "base_url"]
    extra = 0


@admin.register(Org)
class OrgAdmin(OrgScopedAdmin):
    org_path = "name"  # an org-scoped operator views its orgs, never changes one (their own fields are the operator's)
    form = OrgForm
    inlines = [AgentInline, PolicyInline, CredentialInline]
    list_display = ["name", "default_action", "agent_count", "policy_count"]
    list_filter = ["default_action"]
    search_fields = ["name", "agents__name"]
    readonly_fields = ["budget_spend"]

    @admin.display(description="budget spend")
    def budget_spend(self, obj: Org) -> str:
        return budget_summary(("org", obj.name), obj.budget) if obj.pk else "no budget"

    def get_urls(self) -> list[Any]:
        from django.urls import path

        # The model-id search of the default-model and fallback-chain boxes (routing.ops.model_choices).
        choices = path(
            "model-choices/", self.admin_site.admin_view(model_choices_view), name="switchboard_model_choices"
        )
        return [choices, *super().get_urls()]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Org]:
        return (
            super()
            .get_queryset(request)
            .annotate(_agents=Count("agents", distinct=True), _policies=Count("policies", distinct=True))
        )

    @admin.display(description="agents", ordering="_agents")
    def agent_count(self, obj: Org) -> int:
        return obj._agents  # type: ignore[attr-defined]

    @admin.display(description="policies", ordering="_policies")
    def policy_count(self, obj: Org) -> int:
        return obj._policies  # type: ignore[attr-defined]
