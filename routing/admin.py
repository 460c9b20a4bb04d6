"""Admin for resilience settings and usage, plus the form plumbing every config admin shares.

Configuration forms validate in two layers, both from routing.config.validation:
field validators (base URL, pattern, timeouts) on the form fields, then the
cross-object rules by overlaying the unsaved object on the database document
(`routing.config.store.errors_for_edit`) and attaching each error to its field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from typing import Any

from django import forms
from django.contrib import admin
from django.forms.models import BaseInlineFormSet, construct_instance
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from routing.config.alert_spec import alert_from_item
from routing.config.schema import ALERT, RESILIENCE
from routing.config.store import errors_for_edit, in_scope
from routing.config.validation import ConfigError, add_form_validators
from routing.core.resilience import BREAKER_SETTINGS
from routing.models import (
    AlertDelivery,
    AlertRule,
    AuditRecord,
    BreakerAction,
    BreakerOverride,
    ConfigRevision,
    ResilienceSettings,
    UsageRecord,
)
from routing.ops.admin_audit import AuditRecordAdmin
from routing.ops.admin_base import GLOBAL, OrgScopedAdmin, ReadOnlyAdmin
from routing.ops.admin_history import ConfigRevisionAdmin
from routing.ops.admin_widgets import PatternListField, SettingsField, choice_boxes
from routing.runtime.observe import alerts, bodies

FORM_FIELD = {"id": "public_id", "health_probe": "health_probe_enabled"}
_LEAD = re.compile(r"^(?:\[([^\]]*)\])?(?:\.(\w+))?")


def split_path(path: str, scope: str) -> tuple[str | None, str | None]:
    """(`[label]` right after the scope, first field name after it) of an error path."""
    match = _LEAD.match(path[len(scope) :])
    assert match is not None
    return match.group(1), match.group(2)


def add_field_error(form: forms.BaseForm, key: str | None, message: str, default: str | None = None) -> None:
    own = getattr(form, "document_fields", {})  # a form's own document key -> field names (a model's `prices`)
    name = own.get(key or "") or FORM_FIELD.get(key or "", key) or default
    form.add_error(name if name in form.fields else None, message)


def attach_errors(
    form: forms.BaseForm,
    errors: Sequence[ConfigError],
    scope: str,
    skip: tuple[str, ...] = (),
    default: str | None = None,
) -> None:
    """Errors of the edited object onto its fields; errors it causes elsewhere as form errors."""
    for error in errors:
        if not in_scope(error.path, scope):
            form.add_error(None, f"This change would break {error.path}: {error.message}")
            continue
        _, key = split_path(error.path, scope)
        if key not in skip:
            add_field_error(form, key, error.message, default)


def edited_copy(form: forms.ModelForm) -> Any:
    """The form's instance with its cleaned values applied, leaving the real instance alone."""
    return construct_instance(form, copy.copy(form.instance))


class DocumentCheckedForm(forms.ModelForm):
    """A model form that runs the document rules once its own fields are clean.

    Subclasses return `(edit, scope)` from `document_edit(obj)`: a function applying
    the edited object to a document copy, and the object's path in it.
    """

    skip_keys: tuple[str, ...] = ()  # document keys validated by an inline formset instead
    default_field: str | None = None

    def document_edit(self, obj: Any) -> tuple[Callable[[dict[str, Any]], None], str] | None:
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.errors:
            plan = self.document_edit(edited_copy(self))
            if plan is not None:
                edit, scope = plan
                attach_errors(self, errors_for_edit(edit, scope), scope, self.skip_keys, self.default_field)
        return cleaned


class DocumentCheckedFormSet(BaseInlineFormSet):
    """An inline formset validated as one document list of its parent.

    Subclasses return `(edit, scope, label_of_form)` from `document_edit(forms)`;
    errors `scope[label].field` go to the form with that label and field
    (`scope[label]` alone to its `item_field`).
    """

    item_field: str | None = None

    def document_edit(
        self, kept: list[forms.ModelForm]
    ) -> tuple[Callable[[dict[str, Any]], None], str, Callable[[int, forms.ModelForm], str]] | None:
        raise NotImplementedError

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        kept = [f for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        plan = self.document_edit(kept)
        if plan is None:
            return
        edit, scope, label_of = plan
        by_label = {label_of(i, f): f for i, f in enumerate(kept)}
        loose = []
        for error in errors_for_edit(edit, scope):
            if not in_scope(error.path, scope):
                continue  # reported by the parent form
            label, key = split_path(error.path, scope)
            target = by_label.get(label or "")
            if target is None:
                loose.append(error.message)
            else:
                add_field_error(target, key, error.message, self.item_field)
        if loose:
            raise forms.ValidationError(loose)


class GuardedDeleteMixin:
    """Refuse deletions that would break the configuration, on the admin's own confirmation page.

    Subclasses implement `document_delete(objs)`: remove the objects from a document
    copy. Breakages are listed like PROTECT-ed objects, which blocks the delete.
    """

    def document_delete(self, objs: Sequence[Any]) -> Callable[[dict[str, Any]], None]:
        raise NotImplementedError

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, list[Any]]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)  # type: ignore[misc]
        breaks = errors_for_edit(self.document_delete(list(objs)), scope="\0")  # scope matches nothing: new errors only
        return (
            deleted,
            counts,
            perms_needed,
            [*protected, *(f"This deletion would break {e.path}: {e.message}" for e in breaks)],
        )


def checkbox_choices(values: Sequence[str]) -> forms.MultipleChoiceField:
    return forms.MultipleChoiceField(
        choices=[(v, v) for v in values], widget=forms.CheckboxSelectMultiple, required=False
    )


# Resilience settings ---------------------------------------------------------------


class ResilienceForm(DocumentCheckedForm):
    fallback_on = checkbox_choices(RESILIENCE["fallback_on"].choices)

    class Meta:
        model = ResilienceSettings
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_form_validators(self, RESILIENCE)
        self.fields["fallback_on"].help_text = "Failures that move a request to the next link of its chain."

    def clean_fallback_on(self) -> list[str]:
        return [t for t in RESILIENCE["fallback_on"].choices if t in self.cleaned_data["fallback_on"]]

    def document_edit(self, obj: ResilienceSettings) -> tuple[Callable[[dict[str, Any]], None], str]:
        values = {f.name: getattr(obj, f.attr) for f in RESILIENCE}

        def edit(doc: dict[str, Any]) -> None:
            doc["resilience"] = values

        return edit, "resilience"


@admin.register(ResilienceSettings)
class ResilienceSettingsAdmin(OrgScopedAdmin):
    org_path = GLOBAL
    """A singleton: one row (pk=1), never added twice, never deleted."""

    form = ResilienceForm
    fieldsets = [
        (
            "Retries and backoff",
            {
                "fields": [
                    "max_retries",
                    "backoff_base_ms",
                    "backoff_max_ms",
                    "retry_budget_ratio",
                    "retry_budget_min_per_s",
                ]
            },
        ),
        (
            "Timeouts",
            {"fields": ["connect_timeout_ms", "first_token_timeout_ms", "stream_idle_timeout_ms", "total_timeout_ms"]},
        ),
        (
            "Circuit breaker and fallback",
            {"fields": [*BREAKER_SETTINGS, "fallback_max_depth", "fallback_on"]},
        ),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not ResilienceSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ResilienceSettings, form: Any, change: bool) -> None:
        obj.pk = 1
        super().save_model(request, obj, form, change)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Straight to the one row (or to adding it)."""
        if ResilienceSettings.objects.filter(pk=1).exists():
            return HttpResponseRedirect(reverse("admin:routing_resiliencesettings_change", args=[1]))
        return HttpResponseRedirect(reverse("admin:routing_resiliencesettings_add"))


# Read-only records -------------------------------------------------------------------


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    org_path = "org"
    list_display = [
        "created_at",
        "org",
        "agent",
        "endpoint",
        "requested_model",
        "model_used",
        "fallback_reason",
        "status",
        "attempts",
        "latency_ms",
        "cost",
    ]
    list_filter = ["org", "model_used", "fallback_reason", "status", "cached", "created_at"]
    search_fields = ["request_id", "org", "agent", "model_used", "key_prefix"]
    date_hierarchy = "created_at"

    # Bodies only for superusers (docs/security.md#bodies): left out of the page's form,
    # replaced by a note, and no changelist lookup on them (`?request_body__contains=`
    # would answer yes/no questions about their text).
    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        excluded = list(super().get_exclude(request, obj) or ())
        return excluded if bodies.visible_to(request.user) else [*excluded, *bodies.FIELDS]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Sequence[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return fields if bodies.visible_to(request.user) else [*fields, "bodies_note"]

    @admin.display(description="Request and response bodies")
    def bodies_note(self, obj: UsageRecord) -> str:
        return bodies.HIDDEN_NOTE if obj.request_body or obj.response_body else "not stored"

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if lookup.split("__", 1)[0] in bodies.FIELDS and not (request and bodies.visible_to(request.user)):
            return False
        return super().lookup_allowed(lookup, value, request)


@admin.register(BreakerAction)
class BreakerActionAdmin(ReadOnlyAdmin):
    org_path = GLOBAL  # shared breakers of the catalogue, no org
    list_display = ["created_at", "user", "action", "provider", "model", "reason", "expires_at"]
    list_filter = ["action", "provider"]
    search_fields = ["user", "provider", "model", "reason"]


@admin.register(BreakerOverride)
class BreakerOverrideAdmin(ReadOnlyAdmin):
    org_path = "org"  # an org's own breaker views; the shared ones (no org) are not an org's
    """The stored last control per breaker, which every process applies (docs/scale-out.md#controls)."""

    list_display = ["updated_at", "provider", "model", "org", "action", "user", "reason", "until", "revision"]
    list_filter = ["action", "provider"]
    search_fields = ["user", "provider", "model", "org", "reason"]


admin.site.register(ConfigRevision, ConfigRevisionAdmin)  # docs/config-history.md#admin
admin.site.register(AuditRecord, AuditRecordAdmin)  # docs/audit.md#admin


# Alerts (docs/alerts.md) ---------------------------------------------------------------


def alert_item(obj: AlertRule) -> dict[str, Any]:
    """An alert rule row as its document entry."""
    return ALERT.serialise({f.attr: getattr(obj, f.attr) for f in ALERT.columns})


class AlertRuleForm(DocumentCheckedForm):
    """Checked by the document rules (one destination, known events, secret_env as api_key_env)."""

    webhook = SettingsField(("url", "secret_env"), ("URL", "secret env"), texts=("url", "secret_env"), label="Webhook")
    slack = SettingsField(("url",), ("incoming webhook URL",), texts=("url",), label="Slack")
    email = PatternListField(
        wrap="to", placeholder="ops@example.com", label="E-mail to", help_text="One address a line."
    )
    events = choice_boxes(ALERT["events"].choices)
    budget_percent = PatternListField(
        numbers=True, empty_value=[], placeholder="80, 100", help_text="Whole percentages of a budget, e.g. 80, 100."
    )

    class Meta:
        model = AlertRule
        fields = "__all__"

    def clean_events(self) -> list[str]:
        return [e for e in ALERT["events"].choices if e in self.cleaned_data["events"]]

    def document_edit(self, obj: AlertRule) -> tuple[Callable[[dict[str, Any]], None], str]:
        old = self.instance.name if self.instance.pk else None
        item = alert_item(obj)

        def edit(doc: dict[str, Any]) -> None:
            doc["alerts"] = [a for a in doc.get("alerts") or [] if a.get("name") not in (old, obj.name)] + [item]

        return edit, f"alerts[{obj.name}]"


@admin.register(AlertRule)
class AlertRuleAdmin(OrgScopedAdmin):
    """Alert rules are global configuration (every org's thresholds): hidden from org-scoped operators."""

    form = AlertRuleForm
    list_display = ["name", "events", "budget_percent"]
    actions = ["send_test_alert"]

    @admin.action(description="Send a test alert to the selected rules' destinations", permissions=["view"])
    def send_test_alert(self, request: HttpRequest, queryset: Any) -> None:
        import os

        for obj in queryset:
            row = alerts.send_test(alert_from_item(alert_item(obj), os.environ))
            if row.status == AlertDelivery.SENT:
                self.message_user(request, f"Test alert sent to {obj.name} ({row.destination}).")
            else:
                self.message_user(
                    request,
                    f"Test alert to {obj.name} failed: {row.last_error}. Check the destination and try again.",
                    level="error",
                )


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    """Every delivery, its attempts and last error (the payload has no secret: the signature is not kept)."""

    list_display = ["created_at", "event", "rule", "destination", "status", "attempts", "last_error"]
    list_filter = ["status", "event", "rule"]
    search_fields = ["event_key", "rule", "destination", "last_error"]
    date_hierarchy = "created_at"
