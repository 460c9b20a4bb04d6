"""Resilience settings, the configuration version counter and usage records."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from routing.config.schema import RESILIENCE_DEFAULTS as _D
from routing.core.resilience import FALLBACK_TRIGGERS

__all__ = [
    "FALLBACK_TRIGGERS",
    "AlertDelivery",
    "AlertRule",
    "BreakerAction",
    "BreakerOverride",
    "ConfigRevision",
    "ConfigVersion",
    "KeyUsage",
    "ResilienceSettings",
    "UsageRecord",
    "UsageRollup",
]


def default_fallback_on() -> list[str]:
    return list(_D["fallback_on"])


class ResilienceSettings(models.Model):
    """The single row of global resilience settings; defaults and columns follow routing.config.schema.RESILIENCE."""

    max_retries = models.PositiveIntegerField(default=_D["max_retries"])
    backoff_base_ms = models.PositiveIntegerField(default=_D["backoff_base_ms"])
    backoff_max_ms = models.PositiveIntegerField(default=_D["backoff_max_ms"])
    connect_timeout_ms = models.PositiveIntegerField(default=_D["connect_timeout_ms"])
    first_token_timeout_ms = models.PositiveIntegerField(default=_D["first_token_timeout_ms"])
    stream_idle_timeout_ms = models.PositiveIntegerField(default=_D["stream_idle_timeout_ms"])
    total_timeout_ms = models.PositiveIntegerField(default=_D["total_timeout_ms"])
    breaker_failure_threshold = models.PositiveIntegerField(default=_D["breaker_failure_threshold"])
    breaker_cooldown_s = models.FloatField(default=_D["breaker_cooldown_s"])
    fallback_max_depth = models.PositiveIntegerField(default=_D["fallback_max_depth"])
    fallback_on = models.JSONField(default=default_fallback_on)
    retry_budget_ratio = models.FloatField(default=_D["retry_budget_ratio"])
    retry_budget_min_per_s = models.FloatField(default=_D["retry_budget_min_per_s"])
    quota_park_s = models.FloatField(default=_D["quota_park_s"])

    class Meta:
        verbose_name = "resilience settings"
        verbose_name_plural = "resilience settings"

    def __str__(self) -> str:
        return "Resilience settings"

    @classmethod
    def load(cls) -> ResilienceSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class ConfigVersion(models.Model):
    """One row whose counter goes up with every configuration write.

    Serving processes poll it cheaply (off the request path) to catch writes whose
    broadcast they missed, e.g. `import_config` run in another process.
    """

    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


def new_record_id() -> str:
    return uuid.uuid4().hex


class UsageRecord(models.Model):
    """One row per proxied request (docs/metrics.md#usage-records), written off the request path in batches."""

    record_id = models.CharField(
        max_length=32,
        unique=True,
        default=new_record_id,
        help_text="Gateway-generated; makes replays of a batch idempotent.",
    )
    request_id = models.CharField(
        max_length=128, db_index=True, help_text="X-Request-Id (the client's, when it sent one)."
    )
    created_at = models.DateTimeField(db_index=True)
    org = models.CharField(max_length=64, blank=True, db_index=True)
    agent = models.CharField(max_length=64, blank=True)
    key_prefix = models.CharField(max_length=16, blank=True)
    endpoint = models.CharField(max_length=32)
    requested_model = models.CharField(max_length=200, blank=True)
    resolved_model = models.CharField(max_length=200, blank=True)
    model_used = models.CharField(max_length=200, blank=True, db_index=True)
    provider = models.CharField(max_length=64, blank=True)
    fallback_reason = models.CharField(max_length=32, blank=True, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    status = models.PositiveIntegerField(db_index=True)
    error_code = models.CharField(max_length=64, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    # The priced token classes inside prompt/completion (routing.core.prices; docs/usage-records.md#token-classes):
    # NULL when the provider reported none.
    cache_read_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True, help_text="5-minute prompt-cache writes.")
    cache_write_1h_tokens = models.PositiveIntegerField(null=True, blank=True)
    audio_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveIntegerField(null=True, blank=True)
    audio_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    price_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="The prices used: the effective_from of the model's price entry, '' for its undated prices, "
        "'+deployment' for a deployment's negotiated prices.",
    )
    latency_ms = models.FloatField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    streamed = models.BooleanField(default=False)
    tokens_estimated = models.BooleanField(
        default=False, help_text="The tokens are the gateway's estimate: the upstream's stream carried no usage."
    )
    cached = models.BooleanField(
        default=False,
        help_text="Answered by the response cache or a shared identical request: no upstream call, cost 0.",
    )
    trail = models.JSONField(
        default=list,
        blank=True,
        help_text="The chain trail: [model id, what happened] per link considered (docs/usage-records.md#trail).",
    )
    request_body = models.TextField(
        blank=True, default="", help_text="Only for orgs with log_bodies, cut and masked (docs/operations.md#bodies)."
    )
    response_body = models.TextField(blank=True, default="", help_text="As request_body; non-streamed answers only.")

    class Meta:
        ordering = ["-created_at"]
        # The analytics page and the request log read a time range, optionally for one
        # org, model or key (docs/operations.md#analytics).
        indexes = [
            models.Index(fields=["org", "created_at"], name="usage_org_time"),
            models.Index(fields=["model_used", "created_at"], name="usage_model_time"),
            models.Index(fields=["key_prefix", "created_at"], name="usage_key_time"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.endpoint} {self.status}"


ROLLUP_LATENCY_BUCKETS = 40  # routing.runtime.usage.rollup.LATENCY_BUCKETS


class UsageRollup(models.Model):
    """Usage per hour and grouping, kept by the usage writer (routing.runtime.usage.rollup; docs/operations.md#analytics).

    `grouping` says which dimensions a row keeps ("all", "org", "key", "model", "full");
    the others are stored empty. lat_00..lat_39 are a latency histogram.
    """

    grouping = models.CharField(max_length=8)
    bucket = models.DateTimeField(help_text="Start of the hour (UTC).")
    org = models.CharField(max_length=64, blank=True)
    agent = models.CharField(max_length=64, blank=True)
    key_prefix = models.CharField(max_length=16, blank=True)
    model_used = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    client_errors = models.BigIntegerField(default=0)
    fallbacks = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)
    for _i in range(ROLLUP_LATENCY_BUCKETS):
        locals()[f"lat_{_i:02d}"] = models.BigIntegerField(default=0)
    del _i

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["grouping", "bucket", "org", "agent", "key_prefix", "model_used", "provider"],
                name="usage_rollup_key",
            )
        ]
        indexes = [
            models.Index(fields=["grouping", "org", "bucket"], name="rollup_org_time"),
            models.Index(fields=["grouping", "model_used", "bucket"], name="rollup_model_time"),
            models.Index(fields=["grouping", "key_prefix", "bucket"], name="rollup_key_time"),
        ]

    def __str__(self) -> str:
        return f"{self.grouping} {self.bucket:%Y-%m-%d %H}h"


class KeyUsage(models.Model):
    """Per API key: requests, spend and the last use, kept up by the usage writer (docs/usage-records.md#key-usage).

    The writer adds each committed batch in the same transaction as its usage rows (one
    upsert per key in the batch, never per request), so the totals match the records.
    Keyed like the records are: key prefix, org and agent.
    """

    key_prefix = models.CharField(max_length=16)
    org = models.CharField(max_length=64)
    agent = models.CharField(max_length=64)
    requests = models.BigIntegerField(default=0)
    spend = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "key usage"
        verbose_name_plural = "key usage"
        constraints = [models.UniqueConstraint(fields=["key_prefix", "org", "agent"], name="key_usage_key")]

    def __str__(self) -> str:
        return f"{self.key_prefix} ({self.org}/{self.agent})"


class BreakerAction(models.Model):
    """Audit log of operator breaker controls (reset / force open)."""

    created_at = models.DateTimeField(auto_now_add=True)
    user = models.CharField(max_length=150)
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    action = models.CharField(max_length=16)
    reason = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # Viewing the dashboard is staff-only; acting on breakers needs this as well
        # (docs/operations.md#breaker-permission).
        permissions = [("control_breaker", "Can reset or force open circuit breakers")]

    def __str__(self) -> str:
        return f"{self.action} {self.provider}/{self.model} by {self.user}"


class BreakerOverride(models.Model):
    """The operator's last word on one breaker: held open (who, why, until when) or reset.

    One row per breaker key (`org` empty for the shared breaker). Every write also bumps
    ConfigVersion, so each serving process reads the rows with its next snapshot and applies
    the ones whose `revision` it has not applied yet; a process that starts later applies
    the force-opens that still hold. See docs/scale-out.md#controls.
    """

    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    org = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=16)  # "force_open" | "reset"
    user = models.CharField(max_length=150)
    reason = models.CharField(max_length=500, blank=True)
    until = models.DateTimeField(null=True, blank=True, help_text="force_open: expiry (empty: until reset).")
    revision = models.BigIntegerField(default=0, help_text="The configuration version this write produced.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "model", "org"], name="breaker_override_key")]

    def __str__(self) -> str:
        at = f"@{self.org}" if self.org else ""
        return f"{self.action} {self.provider}/{self.model}{at} by {self.user}"


class ConfigRevision(models.Model):
    """One recorded version of the configuration document (docs/config-history.md).

    Written in the same transaction as the change it records (routing.config.history),
    with the whole document as `export_config` prints it — secrets only by reference
    (`api_key_env` names, `api_key: stored`), never a key or its ciphertext — and the
    changes from the previous version. `version` counts revisions (1, 2, 3, …);
    `config_version` is the reload counter the change produced.
    """

    version = models.BigIntegerField(unique=True)
    created_at = models.DateTimeField(db_index=True)
    author = models.CharField(max_length=150, help_text="Admin user, the command's OS user, or 'system'.")
    source = models.CharField(max_length=32, help_text="admin, import_config, rollback, shell, …")
    summary = models.CharField(max_length=500, blank=True)
    changes = models.JSONField(default=list, help_text="The diff from the previous version.")
    document = models.TextField(help_text="The configuration document (JSON), as export_config prints it.")
    digest = models.CharField(max_length=64, help_text="SHA-256 of `document`: an unchanged document records nothing.")
    config_version = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-version"]
        verbose_name = "configuration version"
        verbose_name_plural = "configuration history"
        permissions = [("rollback_config", "Can roll the configuration back to a recorded version")]

    def __str__(self) -> str:
        return f"v{self.version} by {self.author} ({self.source})"


class AppendOnlyQuerySet(models.QuerySet):
    """Audit records are never changed or removed: bulk updates and deletes refuse."""

    def update(self, **kwargs: Any) -> int:
        raise PermissionError("audit records are append-only: they cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("audit records are append-only: they cannot be deleted")


class AuditRecord(models.Model):
    """One write or login attempt: who, when, from where, what object, which fields (docs/audit.md).

    Append-only: a saved record refuses a second save and a delete, so does its queryset, and on
    PostgreSQL a trigger refuses UPDATE and DELETE whatever the client. Never holds a secret: only
    field names, never values.
    """

    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, help_text="The user, `token:<name>`, or the command's OS user.")
    source = models.CharField(max_length=32, db_index=True, help_text="admin, api, login, command, shell, …")
    remote_addr = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=32, db_index=True)
    object_type = models.CharField(max_length=64, blank=True, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    org = models.CharField(max_length=64, blank=True, db_index=True, help_text="The org the object belongs to.")
    fields = models.JSONField(default=list, help_text="The names of the fields a change touched (never values).")
    detail = models.CharField(max_length=500, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = "audit record"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type} {self.object_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise PermissionError("audit records are append-only: they cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("audit records are append-only: they cannot be deleted")


class AlertRule(models.Model):
    """One `alerts:` entry of the configuration (docs/alerts.md); columns follow routing.config.schema.ALERT.

    Exactly one of webhook, slack and email is set. A webhook's `secret_env` names the environment
    variable holding its signing secret: the secret itself is never stored."""

    name = models.CharField(max_length=64, unique=True)
    webhook = models.JSONField(null=True, blank=True, help_text='{"url": ..., "secret_env": ...}')
    slack = models.JSONField(null=True, blank=True, help_text='{"url": ...} (an incoming webhook)')
    email = models.JSONField(null=True, blank=True, help_text='{"to": ["ops@example.com"]}')
    events = models.JSONField(default=list, blank=True)
    budget_percent = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "alert rule"

    def __str__(self) -> str:
        return self.name


class AlertDelivery(models.Model):
    """One alert to one destination and what became of it (docs/alerts.md#deliveries).

    `event_key` (event, subject, threshold, period and the rule) is unique: across every process
    and replica, the insert that wins is the one that delivers. `payload` is what was sent,
    without the signature or any secret."""

    PENDING, SENT, FAILED = "pending", "sent", "failed"

    event_key = models.CharField(max_length=255, unique=True)
    event = models.CharField(max_length=32, db_index=True)
    rule = models.CharField(max_length=64, db_index=True)
    destination = models.CharField(max_length=300)
    status = models.CharField(max_length=16, db_index=True, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "alert delivery"
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"{self.event} → {self.rule} ({self.status})"
