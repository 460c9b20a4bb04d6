"""Admin for organisations (agents, policies, BYO credentials inline) and API keys.

API keys are created through policies.keys.create_api_key, shown once on the
page the save redirects to, and never again; only the prefix is displayed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from policies.keys import KeyProblems, check_controls, create_api_key, revoke_keys
from policies.models import Agent, ApiKey, ManagementToken, OperatorScope, Org, OrgCredential, OrgPolicy
from policies.tokens import create_management_token
from routing.admin import DocumentCheckedForm, DocumentCheckedFormSet, edited_copy
from routing.config.document import child_item, document_from_db
from routing.config.schema import AGENT, CREDENTIAL, ORG, POLICY
from routing.config.store import find_org
from routing.config.validation import add_form_validators
from routing.models import KeyUsage
from routing.ops import scope
from routing.ops.admin_base import HIDDEN, OrgScopedAdmin
from routing.ops.admin_keys import StoredKeyForm
from routing.ops.dashboard.limits import budget_summary
from routing.ops.limit_fields import StructuredLimitsMixin
from routing.ops.model_choices import ChainField, ModelIdSelect, model_choices_view
from routing.ops.money import usd

Edit = Callable[[dict[str, Any]], None]


def _with_validators(form: forms.BaseForm) -> None:
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


# Organisations and their inlines ---------------------------------------------------


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
        _with_validators(form)

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


# Standalone admins of org children (search across orgs) -------------------------------


class OrgChildForm(DocumentCheckedForm):
    """An agent, policy or credential edited on its own: moved within the org's list."""

    kind = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _with_validators(self)

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
        return _with_actor(super().get_form(request, obj, change, **kwargs), request)

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


# API keys ---------------------------------------------------------------------------


def short_time(at: datetime | None, missing: str) -> str:
    """`2026-12-02 03:56` in UTC: a third of the width of the admin's default date format."""
    return missing if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


NEW_KEY_SESSION = "switchboard_new_api_key"  # {"pk": ..., "plaintext": ...}, removed when shown


def secret_shown_once(
    model_admin: admin.ModelAdmin, request: HttpRequest, obj: Any, session_key: str, noun: str, name: str, template: str
) -> HttpResponse:
    """The page that shows a new key or token's plaintext once: it leaves the session as it is
    rendered and the page is never cached, so a reload or the back button shows it no more."""
    held = request.session.get(session_key) or {}
    plaintext = None
    if held.get("pk") == obj.pk:
        plaintext = held["plaintext"]
        del request.session[session_key]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"{noun} created" if plaintext else noun,
        name: obj,
        "plaintext": plaintext,
    }
    response = TemplateResponse(request, template, context)
    response["Cache-Control"] = "no-store"
    return response


def key_usage_annotated(queryset: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
    """Keys annotated with usage_requests, usage_spend and usage_last_used_at (None: never used)."""
    from django.db.models import OuterRef, Subquery

    usage = KeyUsage.objects.filter(
        key_prefix=OuterRef("prefix"), org=OuterRef("agent__org__name"), agent=OuterRef("agent__name")
    )
    return queryset.annotate(
        usage_requests=Subquery(usage.values("requests")[:1]),
        usage_spend=Subquery(usage.values("spend")[:1]),
        usage_last_used_at=Subquery(usage.values("last_used_at")[:1]),
    )


KEY_CONTROL_FIELDS = ["enabled", "limits", "budget", "allowed_models", "priority", "metadata"]


class ApiKeyForm(StructuredLimitsMixin, OrgBoundedForm, forms.ModelForm):
    """A key's controls (docs/limits.md#keys), checked by the one validation the management API uses, and
    within its org's bounds for a user who may not manage the org (routing.ops.scope)."""

    bounded = {"limits": "limits", "budget": "budget", "priority": "priority", "allowed_models": "models"}  # noqa: RUF012

    class Meta:
        model = ApiKey
        fields = "__all__"
        labels = {"allowed_models": "Models"}

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if "metadata" in data and data["metadata"] is None:
            data["metadata"] = {}
        controls = {name: data.get(name) for name in ("limits", "budget", "metadata", "priority")}
        controls["models"] = data.get("allowed_models")
        try:
            check_controls({k: v for k, v in controls.items() if k in data or k == "models"})
        except KeyProblems as problems:
            for path, message in problems.problems:
                field = path.split(".")[0].split("[")[0]
                field = "allowed_models" if field == "models" else field
                self.add_error(field if field in self.fields else None, message)
        self.check_org_bounds(data, "this API key")
        return data

    def org_of(self, data: dict[str, Any]) -> Org | None:
        agent = data.get("agent") or (self.instance.agent if self.instance.agent_id else None)
        return agent.org if agent is not None else None


def _with_actor(form: type[forms.BaseForm], request: HttpRequest) -> type[forms.BaseForm]:
    """The admin's form class for this request (a fresh class per call), knowing who saves it."""
    form.actor = request.user  # type: ignore[attr-defined]
    return form


@admin.register(ApiKey)
class ApiKeyAdmin(OrgScopedAdmin):
    """Keys are generated by the service and shown once, after the add form; the hash never appears.

    Redirect after POST: the add form's POST creates the key, keeps its plaintext in the
    session and redirects to the "created" page; that GET takes it out of the session, so
    a reload (or the back button) shows "not shown again" and never creates another key.
    """

    org_path, scoped_may_edit = "agent__org__name", True  # within the org's bounds (ApiKeyForm)
    # Fits 1280 px beside the filters: the agent column reads org/agent, dates are short (UTC).
    list_display = [
        "prefix_display",
        "agent",
        "label",
        "created",
        "expires",
        "status",
        "last_used",
        "requests",
        "spend",
    ]
    list_filter = ["revoked", "agent__org", "created_at"]
    search_fields = ["prefix", "label", "note", "agent__name", "agent__org__name"]
    list_select_related = ["agent__org"]
    actions = ["revoke_keys"]
    form = ApiKeyForm
    add_fields = ["agent", "label", "note", "expires_at", *KEY_CONTROL_FIELDS]
    change_fields = [
        "prefix",
        "agent",
        "label",
        "note",
        "created_at",
        "expires_at",
        *KEY_CONTROL_FIELDS,
        "revoked",
        "last_used",
        "requests",
        "spend",
    ]
    autocomplete_fields = ["agent"]
    change_form_template = "admin/policies/apikey/change_form.html"

    def get_urls(self) -> list[Any]:
        from django.urls import path

        view = self.admin_site.admin_view
        return [
            path("<int:pk>/created/", view(self.created_view), name="policies_apikey_created"),
            path("<int:pk>/revoke/", view(self.revoke_view), name="policies_apikey_revoke"),
            *super().get_urls(),
        ]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "agent":
            kwargs["queryset"] = Agent.objects.select_related("org")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        return self.add_fields if obj is None else self.change_fields

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        return _with_actor(super().get_form(request, obj, change, **kwargs), request)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        return [] if obj is None else ["prefix", "agent", "created_at", "last_used", "requests", "spend"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        """Each key with its usage totals (routing.KeyUsage, kept by the usage writer): one query for the list."""
        return key_usage_annotated(super().get_queryset(request))

    @admin.display(description="last used (UTC)", ordering="usage_last_used_at")
    def last_used(self, obj: ApiKey) -> str:
        return short_time(getattr(obj, "usage_last_used_at", None), "never")

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj: ApiKey) -> str:
        return short_time(obj.created_at, "–")

    @admin.display(description="expires (UTC)", ordering="expires_at")
    def expires(self, obj: ApiKey) -> str:
        return short_time(obj.expires_at, "never")

    @admin.display(description="requests", ordering="usage_requests")
    def requests(self, obj: ApiKey) -> int:
        return getattr(obj, "usage_requests", None) or 0

    @admin.display(description="spend (USD)", ordering="usage_spend")
    def spend(self, obj: ApiKey) -> str:
        return usd(getattr(obj, "usage_spend", None) or 0)

    @admin.display(description="key", ordering="prefix")
    def prefix_display(self, obj: ApiKey) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="status")
    def status(self, obj: ApiKey) -> str:
        if obj.revoked:
            label, color = "revoked", "#ba2121"
        elif obj.expires_at and obj.expires_at <= timezone.now():
            label, color = "expired", "#a07000"
        elif not obj.enabled:
            label, color = "disabled", "#a07000"
        else:
            label, color = "active", "#2e7d32"
        return format_html('<strong style="color:{}">{}</strong>', color, label)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, plaintext = create_api_key(
            agent=obj.agent,
            label=obj.label,
            expires_at=obj.expires_at,
            note=obj.note,
            enabled=obj.enabled,
            limits=obj.limits,
            budget=obj.budget,
            models=obj.allowed_models,
            priority=obj.priority,
            metadata=obj.metadata,
        )
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        obj._state.adding = False
        request.session[NEW_KEY_SESSION] = {"pk": key.pk, "plaintext": plaintext}  # until the next GET shows it

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        """Redirect to the one page that shows the key (a reload of it creates nothing)."""
        if NEW_KEY_SESSION not in request.session:
            return super().response_add(request, obj, post_url_continue)
        return HttpResponseRedirect(reverse("admin:policies_apikey_created", args=[obj.pk]))

    def created_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Show the new key once: it leaves the session as it is rendered."""
        key = get_object_or_404(self.get_queryset(request).select_related("agent__org"), pk=pk)
        if not self.has_view_permission(request, key):
            raise PermissionDenied
        return secret_shown_once(
            self, request, key, NEW_KEY_SESSION, "API key", "key", "admin/policies/apikey/key_created.html"
        )

    def revoke_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The change page's Revoke button (POST): the same revocation as the list action."""
        key = get_object_or_404(self.get_queryset(request), pk=pk)  # an org-scoped operator's keys only
        if request.method != "POST":
            return HttpResponseRedirect(reverse("admin:policies_apikey_change", args=[pk]))
        if not self.has_change_permission(request, key):
            raise PermissionDenied
        self._revoked(request, revoke_keys(ApiKey.objects.filter(pk=pk)))
        return HttpResponseRedirect(reverse("admin:policies_apikey_change", args=[pk]))

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        self._revoked(request, revoke_keys(queryset))

    def _revoked(self, request: HttpRequest, count: int) -> None:
        self.message_user(
            request, f"Revoked {count} key(s); requests using them now get 401 invalid_api_key.", messages.SUCCESS
        )


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
