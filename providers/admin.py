"""Admin for providers, models (with their ordered fallback chain) and aliases.

Every save is validated with routing.config.validation (see routing.admin); the
provider's API key is never stored or shown, only the name of its env variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from providers.models import Alias, Deployment, FallbackLink, Model, Provider, ProviderProbe
from routing.admin import (
    DocumentCheckedForm,
    DocumentCheckedFormSet,
    GuardedDeleteMixin,
    add_field_error,
    checkbox_choices,
    edited_copy,
    split_path,
)
from routing.config.document import deployment_item, model_item, provider_item
from routing.config.schema import AFFINITY_KEYS, CONCURRENCY_KEYS, DIALECTS, HEDGE_KEYS, MODEL, PROVIDER, TIMEOUTS
from routing.config.store import errors_for_edit, in_scope, rename_references, replace_item
from routing.config.validation import add_form_validators
from routing.core.breaker import BreakerKey
from routing.core.kinds import ENDPOINT_KINDS
from routing.core.prices import CLASSES as PRICE_CLASSES
from routing.core.prices import PRICE_KEYS
from routing.ops import controls
from routing.ops.admin_base import GLOBAL, OrgScopedAdmin
from routing.ops.admin_keys import StoredKeyForm
from routing.ops.admin_widgets import NextPositionFormSet, PriceVersionsField, SettingsField, SkipsUnchangedSave
from routing.runtime.observe import health
from routing.runtime.process import current

Edit = Callable[[dict[str, Any]], None]
TIMEOUT_FIELDS = TIMEOUTS
CAPABILITIES = MODEL["capabilities"].choices
FALLBACK_TRIGGERS = MODEL["fallback_on"].choices


def _old(model: type, pk: int | None, field: str) -> str | None:
    """The value of `field` as saved in the database (None for a new object)."""
    return None if pk is None else model.objects.filter(pk=pk).values_list(field, flat=True).first()


class ProviderForm(StoredKeyForm, DocumentCheckedForm):
    class Meta:
        model = Provider
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "dialect" in self.fields:  # the column has no choices (a new dialect needs no migration)
            self.fields["dialect"].widget = forms.Select(choices=[(d, d) for d in DIALECTS])
        add_form_validators(self, PROVIDER)

    def document_edit(self, obj: Provider) -> tuple[Edit, str]:
        old, item = _old(Provider, obj.pk, "name"), provider_item(obj)

        def edit(doc: dict[str, Any]) -> None:
            rename_references(doc, "provider", old, obj.name)
            replace_item(doc["providers"], "name", old, item)

        return edit, f"providers[{obj.name}]"


@admin.register(Provider)
class ProviderAdmin(OrgScopedAdmin):
    org_path = GLOBAL  # the catalogue is global configuration: an org-scoped operator views it only
    form = ProviderForm
    list_display = ["name", "dialect", "base_url", "api_key_env", "model_count", "probing", "last_probe", "updated_at"]
    list_filter = ["dialect", "health_probe_enabled"]
    search_fields = ["name", "base_url"]
    fieldsets = [
        (None, {"fields": ["name", "dialect", "base_url", "api_key_env", "api_key", "clear_api_key"]}),
        ("Timeout overrides (empty: global default)", {"fields": list(TIMEOUT_FIELDS)}),
        ("Health", {"fields": ["health_check_path", "health_probe_enabled"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Provider]:
        from django.db.models import Count, OuterRef, Subquery

        stored = ProviderProbe.objects.filter(provider=OuterRef("name"))
        return (
            super()
            .get_queryset(request)
            .annotate(
                _models=Count("models"),
                _probe_status=Subquery(stored.values("status")[:1]),
                _probe_checked=Subquery(stored.values("checked_at")[:1]),
                _probe_detail=Subquery(stored.values("detail")[:1]),
            )
        )

    @admin.display(description="models", ordering="_models")
    def model_count(self, obj: Provider) -> int:
        return obj._models  # type: ignore[attr-defined]

    @admin.display(description="health probe", ordering="health_probe_enabled")
    def probing(self, obj: Provider) -> str:
        """Whether serving processes probe it in the background: words, not a red cross."""

        return health.probe_mode(obj.health_probe_enabled, bool(settings.SWITCHBOARD_HEALTH_PROBES))

    @admin.display(description="last probe")
    def last_probe(self, obj: Provider) -> str:
        """The last result this process holds, else the one stored by probe_providers."""

        status, checked, detail = health.last_probe(
            obj.name,
            obj._probe_status,  # type: ignore[attr-defined]
            obj._probe_checked,  # type: ignore[attr-defined]
            obj._probe_detail,  # type: ignore[attr-defined]
        )
        symbol, color = {"up": ("▲", "#2e7d32"), "down": ("▼", "#ba2121")}.get(status, ("?", "#777"))
        when = f" · {checked}" if checked else ""
        return format_html(
            '<span data-probe="{}" title="{}" style="color:{}">{} {}</span><small>{}</small>',
            status,
            detail,
            color,
            symbol,
            status if status != "unknown" else "not probed yet",
            when,
        )


PRICE_FIELDS = ["input_price_per_mtok", "output_price_per_mtok", *(f"{name}_price_per_mtok" for name in PRICE_CLASSES)]


class ModelConfigForm(DocumentCheckedForm):
    capabilities = checkbox_choices(CAPABILITIES)
    fallback_on = checkbox_choices(FALLBACK_TRIGGERS)
    price_versions = PriceVersionsField(
        label="Dated prices",
        help_text="Prices from a date on (UTC), in US dollars per million tokens; a blank cell keeps the price above "
        "for that class. Fill the blank row to add one; clear a row to remove it (docs/configuration.md#price-versions).",
    )
    concurrency = SettingsField(
        CONCURRENCY_KEYS,
        ("initial", "min", "max", "queue"),
        label="Concurrency",
        help_text="Adaptive limit of calls at once per deployment (whole numbers, min ≤ initial ≤ max) and how many "
        "requests may wait beyond it; blank: off (docs/overload.md#configuration).",
    )
    hedge = SettingsField(
        HEDGE_KEYS,
        ("extra calls, % of requests", "hedge requests with tools"),
        flags=("tools",),
        label="Hedge",
        help_text="A late first token is asked of another deployment too, within this % of extra calls; blank: off "
        "(docs/overload.md#hedging).",
    )
    affinity = SettingsField(
        AFFINITY_KEYS,
        ("seconds",),
        label="Affinity",
        help_text="Keep a conversation on the deployment that served it last for this long since its last request; "
        "blank: off (docs/deployments.md#affinity).",
    )
    skip_keys = ("fallbacks",)  # validated with the inline chain
    document_fields = {"prices": "price_versions"}  # noqa: RUF012 - the document's name of the dated prices

    class Meta:
        model = Model
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_form_validators(self, MODEL)
        self.fields[
            "capabilities"
        ].help_text = f"Every fallback must serve each of {', '.join(ENDPOINT_KINDS)} this model serves."
        self.fields["fallback_on"].help_text = "Overrides the global fallback_on; none checked inherits it."
        for name in PRICE_FIELDS:  # the one currency of prices and budgets (docs/dashboard.md#currency)
            if name in self.fields:
                field = self.fields[name]
                field.label = f"{name.removesuffix('_price_per_mtok').replace('_', ' ').capitalize()} price"
                field.help_text = " ".join(["US$ per million tokens.", str(field.help_text or "")]).strip()

    def clean_capabilities(self) -> list[str]:
        return [c for c in CAPABILITIES if c in self.cleaned_data["capabilities"]]

    def clean_fallback_on(self) -> list[str] | None:
        return [t for t in FALLBACK_TRIGGERS if t in self.cleaned_data["fallback_on"]] or None

    def document_edit(self, obj: Model) -> tuple[Edit, str]:
        if _posted_deployments(self.data):  # the deployments inline validates the served-by fields
            self.skip_keys = ("fallbacks", "deployments", "provider", "upstream_model")
        return model_edit(obj, None), f"models[{obj.public_id}]"


def _posted_deployments(data: Any) -> bool:
    """Whether the posted deployments inline keeps at least one row with a provider."""
    try:
        total = int(data.get("deployments-TOTAL_FORMS") or 0)
    except (TypeError, ValueError):
        return False
    return any(data.get(f"deployments-{i}-provider") and not data.get(f"deployments-{i}-DELETE") for i in range(total))


def model_edit(obj: Model, fallbacks: list[str] | None, deployments: list[dict[str, Any]] | None = None) -> Edit:
    """Put the edited model (and, if given, its new chain or deployments) into a document copy."""
    old = _old(Model, obj.pk, "public_id")

    def edit(doc: dict[str, Any]) -> None:
        current = next((m for m in doc["models"] if old is not None and m.get("id") == old), {})
        rename_references(doc, "model", old, obj.public_id)
        chain = fallbacks if fallbacks is not None else current.get("fallbacks", [])
        served = deployments if deployments is not None else current.get("deployments")
        replace_item(doc["models"], "id", old, model_item(obj, chain, served))

    return edit


class DeploymentFormSet(NextPositionFormSet, DocumentCheckedFormSet):
    """The model's deployments (docs/deployments.md), validated as its `deployments` list.

    Errors of one deployment land on its row; errors of the model's served-by fields
    (shorthand and deployments both given, no deployment) above the inline.
    """

    item_field = "provider"

    def clean(self) -> None:
        super(DocumentCheckedFormSet, self).clean()
        if any(self.errors):
            return
        obj = self.instance
        if not obj.public_id:
            return  # the model form reports it
        kept = [f for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        kept.sort(key=lambda f: (f.cleaned_data.get("position") or 0, self.forms.index(f)))
        rows = [deployment_item(edited_copy(f)) for f in kept]
        scope = f"models[{obj.public_id}]"
        by_label = {str(row.get("provider") or i): f for i, (row, f) in enumerate(zip(rows, kept, strict=True))}
        loose = []
        for error in errors_for_edit(model_edit(obj, None, rows), scope):
            if not in_scope(error.path, scope):
                continue  # reported by the model form
            inner = f"{scope}.deployments"
            if in_scope(error.path, inner):
                label, key = split_path(error.path, inner)
                target = by_label.get(label or "")
                if target is not None:
                    add_field_error(target, key, error.message, self.item_field)
                    continue
                loose.append(error.message)
            elif kept and split_path(error.path, scope)[1] in ("provider", "upstream_model", "routing"):
                loose.append(error.message)
        if loose:
            raise forms.ValidationError(loose)

    def document_edit(self, kept: list[forms.ModelForm]) -> Any:  # clean() above does the work
        return None

    def validate_unique(self) -> None:
        """One deployment per provider is the document rule's (its message names model and provider)."""


class DeploymentForm(forms.ModelForm):
    prices = SettingsField(
        PRICE_KEYS,
        tuple(key.replace("_", " ") for key in PRICE_KEYS),
        label="Prices (US$ per million tokens)",
        help_text="Negotiated prices of this deployment; a blank box keeps the model's price for that class.",
    )

    class Meta:
        model = Deployment
        fields = "__all__"


class DeploymentInline(admin.TabularInline):
    model = Deployment
    fk_name = "model"
    form = DeploymentForm
    formset = DeploymentFormSet
    fields = ["position", "provider", "upstream_model", "weight", "rpm", "tpm", "prices"]
    autocomplete_fields = ["provider"]  # a search box, not one <select> of every provider per row
    ordering = ["position", "id"]
    extra = 0
    verbose_name = "deployment"
    verbose_name_plural = (
        "deployments (several providers serving this model; leave empty to use the provider above, docs/deployments.md)"
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Deployment]:
        return super().get_queryset(request).select_related("provider")


class FallbackFormSet(NextPositionFormSet, DocumentCheckedFormSet):
    item_field = "target"

    def document_edit(self, kept: list[forms.ModelForm]) -> Any:
        obj = self.instance
        if not obj.public_id:
            return None  # the model form reports it
        ordered = sorted(kept, key=lambda f: (f.cleaned_data.get("position") or 0, kept.index(f)))
        kept[:] = ordered  # error labels are indexes in chain order
        chain = [f.cleaned_data["target"].public_id for f in ordered]
        return model_edit(obj, chain), f"models[{obj.public_id}].fallbacks", lambda i, f: str(i)


class FallbackLinkInline(admin.TabularInline):
    model = FallbackLink
    fk_name = "model"
    formset = FallbackFormSet
    fields = ["position", "target"]
    ordering = ["position", "id"]
    autocomplete_fields = ["target"]  # a search box, not one <select> of every model per row
    extra = 1

    def get_queryset(self, request: HttpRequest) -> QuerySet[FallbackLink]:
        return super().get_queryset(request).select_related("model", "target")

    verbose_name = "fallback"
    verbose_name_plural = "fallback chain (tried in position order when this model fails)"


def _breaker_action(modeladmin: admin.ModelAdmin, request: Any, queryset: Any, action: str, **extra: Any) -> None:
    """Apply a breaker control to the shared breaker of each selected model, in every process."""

    done = []
    if not controls.may_control(request.user):
        raise PermissionDenied(controls.REFUSED)
    for model in queryset.select_related("provider").prefetch_related("deployments__provider"):
        names = [d.provider.name for d in model.deployments.all()] or [model.provider.name]
        failed = False
        for name in names:  # each deployment has its breaker (docs/deployments.md)
            try:
                controls.apply(action, BreakerKey(name, model.public_id), request.user.get_username(), **extra)
            except controls.ControlError as exc:
                failed = True
                modeladmin.message_user(request, f"{model.public_id} @ {name}: {exc}", messages.ERROR)
        if not failed:
            done.append(model.public_id)
    if done:
        verb = "reset (closed)" if action == "reset" else "forced open for 30 minutes"
        modeladmin.message_user(request, f"Breaker {verb} in every process: {', '.join(done)}.", messages.SUCCESS)


@admin.action(description="Reset the breaker of the selected models (close it now)", permissions=["control_breaker"])
def reset_breakers(modeladmin: admin.ModelAdmin, request: Any, queryset: Any) -> None:
    _breaker_action(modeladmin, request, queryset, "reset")


@admin.action(
    description="Force open the breaker of the selected models for 30 minutes (maintenance)",
    permissions=["control_breaker"],
)
def force_open_breakers(modeladmin: admin.ModelAdmin, request: Any, queryset: Any) -> None:
    reason = f"maintenance, forced open from the admin by {request.user.get_username()}"
    _breaker_action(modeladmin, request, queryset, "force_open", reason=reason, minutes=30)


@admin.register(Model)
class ModelAdmin(SkipsUnchangedSave, GuardedDeleteMixin, OrgScopedAdmin):
    org_path = GLOBAL
    form = ModelConfigForm
    inlines = [FallbackLinkInline, DeploymentInline]
    readonly_fields = ["deployment_states"]
    actions = [reset_breakers, force_open_breakers]
    list_display = [
        "public_id",
        "served_by",
        "upstream_model",
        "capability_list",
        "chain",
        "context_window",
        "updated_at",
    ]
    list_filter = ["provider", "provider__dialect", "residency"]
    search_fields = ["public_id", "upstream_model", "provider__name"]
    list_select_related = ["provider"]
    fieldsets = [
        (None, {"fields": ["public_id", "provider", "upstream_model", "capabilities"]}),
        ("Deployments", {"fields": ["routing", "affinity", "deployment_states"]}),
        (
            "Limits and prices",
            {
                "fields": [
                    "context_window",
                    "max_output_tokens",
                    "residency",
                    *PRICE_FIELDS,
                    "price_versions",
                ]
            },
        ),
        ("Resilience overrides (empty: provider or global default)", {"fields": [*TIMEOUT_FIELDS, "fallback_on"]}),
        ("Response cache", {"fields": ["cache_ttl_s"]}),
        ("Overload (docs/overload.md)", {"fields": ["concurrency", "hedge"]}),
    ]

    def has_control_breaker_permission(self, request: HttpRequest) -> bool:
        """The breaker actions are listed only for users who may act on breakers."""

        return controls.may_control(request.user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Model]:
        from django.db.models import Prefetch

        deployments = Prefetch("deployments", queryset=Deployment.objects.select_related("provider"))
        return super().get_queryset(request).prefetch_related("fallback_links__target", deployments)

    def document_delete(self, objs: list[Model]) -> Edit:
        ids = {m.public_id for m in objs}

        def edit(doc: dict[str, Any]) -> None:
            doc["models"] = [m for m in doc["models"] if m["id"] not in ids]
            for m in doc["models"]:  # links to them are PROTECT-ed: Django reports those itself
                m["fallbacks"] = [t for t in m.get("fallbacks", []) if t not in ids]
            doc["aliases"] = {a: t for a, t in doc["aliases"].items() if t not in ids}  # CASCADE

        return edit

    @admin.display(description="served by")
    def served_by(self, obj: Model) -> str:
        names = [d.provider.name for d in obj.deployments.all()]
        return ", ".join(names) if names else (obj.provider.name if obj.provider_id else "—")

    @admin.display(description="live breaker per deployment")
    def deployment_states(self, obj: Model) -> str:
        """Each deployment's shared breaker as this process sees it (read-only; docs/deployments.md#visibility)."""
        from django.utils.html import format_html_join

        breakers = current().breakers
        if obj.pk is None:
            return "—"
        names = [d.provider.name for d in obj.deployments.all()] or ([obj.provider.name] if obj.provider_id else [])
        views = {v.key: v for v in breakers.views()}
        rows = []
        for name in names:
            key = BreakerKey(name, obj.public_id)
            view = views.get(key)
            state = breakers.state(key).name.lower()
            failures = view.consecutive_failures if view is not None else 0
            rows.append((name, state, state, failures))
        return format_html_join(
            "",
            '<div><b>{}</b>: <span data-breaker-state="{}">{}</span> <small>({} consecutive failures)</small></div>',
            rows,
        )

    @admin.display(description="capabilities")
    def capability_list(self, obj: Model) -> str:
        return ", ".join(obj.capabilities or [])

    @admin.display(description="fallback chain")
    def chain(self, obj: Model) -> str:
        links = sorted(obj.fallback_links.all(), key=lambda link: (link.position, link.id))
        return " → ".join(link.target.public_id for link in links) or "—"


class AliasForm(DocumentCheckedForm):
    default_field = "name"

    class Meta:
        model = Alias
        fields = "__all__"

    def document_edit(self, obj: Alias) -> tuple[Edit, str]:
        old = _old(Alias, obj.pk, "name")

        def edit(doc: dict[str, Any]) -> None:
            doc["aliases"].pop(old, None)
            doc["aliases"][obj.name] = obj.target.public_id

        return edit, f"aliases[{obj.name}]"


@admin.register(Alias)
class AliasAdmin(GuardedDeleteMixin, OrgScopedAdmin):
    org_path = GLOBAL
    form = AliasForm
    list_display = ["name", "target"]
    search_fields = ["name", "target__public_id"]
    list_select_related = ["target"]
    autocomplete_fields = ["target"]

    def document_delete(self, objs: list[Alias]) -> Edit:
        names = {a.name for a in objs}

        def edit(doc: dict[str, Any]) -> None:
            doc["aliases"] = {a: t for a, t in doc["aliases"].items() if a not in names}

        return edit
