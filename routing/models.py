"""Resilience settings, the configuration version counter and usage records."""

from __future__ import annotations

import uuid

from django.db import models

FALLBACK_TRIGGERS = ("provider_error", "rate_limited", "timeout", "circuit_open", "context_length", "content_filter")
DEFAULT_FALLBACK_ON = ["provider_error", "rate_limited", "timeout", "circuit_open"]


def default_fallback_on() -> list[str]:
    return list(DEFAULT_FALLBACK_ON)


class ResilienceSettings(models.Model):
    """The single row of global resilience defaults (CONTRACT §5)."""

    max_retries = models.PositiveIntegerField(default=2)
    backoff_base_ms = models.PositiveIntegerField(default=100)
    backoff_max_ms = models.PositiveIntegerField(default=5000)
    connect_timeout_ms = models.PositiveIntegerField(default=5000)
    first_token_timeout_ms = models.PositiveIntegerField(default=30000)
    stream_idle_timeout_ms = models.PositiveIntegerField(default=60000)
    total_timeout_ms = models.PositiveIntegerField(default=600000)
    breaker_failure_threshold = models.PositiveIntegerField(default=5)
    breaker_cooldown_s = models.FloatField(default=30)
    fallback_max_depth = models.PositiveIntegerField(default=8)
    fallback_on = models.JSONField(default=default_fallback_on)
    retry_budget_ratio = models.FloatField(default=0.2)
    retry_budget_min_per_s = models.FloatField(default=10)

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
    """One row per proxied request (CONTRACT §8), written off the request path in batches."""

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
    latency_ms = models.FloatField(default=0)
    ttft_ms = models.FloatField(null=True, blank=True)
    streamed = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.request_id} {self.endpoint} {self.status}"


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

    def __str__(self) -> str:
        return f"{self.action} {self.provider}/{self.model} by {self.user}"
