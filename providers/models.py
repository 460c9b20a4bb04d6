"""What exists upstream: providers, the models they serve, aliases, fallback chains.

Saving any of these rebuilds the in-memory snapshot in every serving process
(see routing.config.reload); the request path never reads these tables.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from routing.config.schema import CAPABILITIES, DIALECTS, ROUTINGS

__all__ = ["CAPABILITIES", "DIALECTS", "Alias", "Deployment", "FallbackLink", "Model", "Provider", "ProviderProbe"]


class Provider(models.Model):
    """An upstream API endpoint speaking one dialect."""

    name = models.SlugField(max_length=64, unique=True)
    # No `choices`: the dialect table (routing.core.kinds.DIALECT_KINDS) is checked by validation and
    # offered as a select by the admin, so adding a dialect needs no migration.
    dialect = models.CharField(max_length=16, default="openai", help_text="The upstream API family.")
    base_url = models.CharField(max_length=500, help_text="http(s) URL, e.g. https://api.openai.com/v1")
    api_key_env = models.CharField(
        max_length=128,
        blank=True,
        help_text="Name of the environment variable holding the API key (SWITCHBOARD_UPSTREAM_*).",
    )
    # Fernet ciphertext of a key entered in the admin (SWITCHBOARD_FERNET_KEY); never the key itself.
    api_key_encrypted = models.TextField(blank=True, default="", editable=False)
    connect_timeout_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the global default; gives this provider its own connection pool."
    )
    first_token_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    total_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    health_check_path = models.CharField(
        max_length=200, blank=True, help_text="Probe = GET base_url + path. Empty: probe the base URL."
    )
    health_probe_enabled = models.BooleanField(
        default=False, help_text="Probe this provider in the background even when probes are off globally."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Model(models.Model):
    """A public model id served by one provider, with its capability manifest."""

    public_id = models.CharField(
        "id", max_length=200, unique=True, help_text="Public id clients send; may contain '/'."
    )
    # The one-deployment shorthand; both empty when the model lists Deployment rows (docs/deployments.md#storage).
    provider = models.ForeignKey(
        Provider,
        on_delete=models.PROTECT,
        related_name="models",
        null=True,
        blank=True,
        help_text="Empty when the model lists its deployments below.",
    )
    upstream_model = models.CharField(max_length=200, blank=True, help_text="The model name sent to the provider.")
    # The list lives in the help text of the admin form (providers.admin), not here: a new capability
    # or endpoint kind then needs no migration.
    capabilities = models.JSONField(default=list, blank=True, help_text="What the model serves and supports.")
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    residency = models.CharField(max_length=32, blank=True)
    input_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    # Token classes (docs/configuration.md#prices): empty, priced at the input or output price.
    cache_read_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cache_write_price_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="A 5-minute prompt-cache write."
    )
    cache_write_1h_price_per_mtok = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Empty: the 5-minute write price."
    )
    audio_input_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    reasoning_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    audio_output_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    price_versions = models.JSONField(
        default=list,
        blank=True,
        encoder=DjangoJSONEncoder,
        help_text="Dated prices: [{effective_from: 2026-01-01, input: 3, output: 15, ...}] (docs/configuration.md).",
    )
    connect_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    first_token_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    total_timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    fallback_on = models.JSONField(
        null=True, blank=True, help_text="Overrides the global fallback_on list; empty means inherit."
    )
    cache_ttl_s = models.PositiveIntegerField(
        "cache TTL (s)",
        null=True,
        blank=True,
        help_text="Serve identical non-streaming chat, embeddings and rerank answers from the response cache "
        "for this many seconds, per organisation (docs/cache.md). Empty: no cache.",
    )
    routing = models.CharField(
        max_length=16,
        blank=True,
        choices=[(r, r) for r in ROUTINGS],
        help_text="How a try picks one of the deployments below; empty means weighted (docs/deployments.md).",
    )
    concurrency = models.JSONField(
        null=True,
        blank=True,
        help_text='Adaptive concurrency limit per deployment, e.g. {"initial": 20, "min": 1, "max": 200, '
        '"queue": 1000}; requests beyond it wait in a fair queue or are shed (docs/overload.md). Blank: off.',
    )
    hedge = models.JSONField(
        null=True,
        blank=True,
        help_text='Hedged first tokens, e.g. {"budget_pct": 5, "tools": false}: a late first token is asked of '
        "another deployment too, within budget_pct % extra calls (docs/overload.md#hedging). Blank: off.",
    )
    affinity = models.JSONField(
        null=True,
        blank=True,
        help_text='Prompt-cache affinity, e.g. {"ttl_s": 300}: each conversation stays on the deployment that served '
        "it last for this long since its last request (docs/deployments.md#affinity). Blank: off.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["public_id"]

    def __str__(self) -> str:
        return self.public_id


class FallbackLink(models.Model):
    """One hop of a model's ordered fallback chain."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="fallback_links")
    target = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["model", "position", "id"]

    def __str__(self) -> str:
        return f"{self.model} → {self.target}"


class Deployment(models.Model):
    """One more place a model is served: a (provider, upstream model) with a weight and capacity.

    A model without deployment rows is served by its own provider + upstream_model (the
    one-deployment shorthand every model had before deployments existed, so no data
    migration is needed). With rows, the rows are its deployments in position order and
    the model's own provider / upstream_model are empty (docs/deployments.md#storage).
    """

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="deployments")
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="deployments")
    upstream_model = models.CharField(max_length=200, help_text="The model name sent to this provider.")
    weight = models.PositiveIntegerField(null=True, blank=True, help_text="Share of traffic (weighted); empty: 1.")
    rpm = models.PositiveIntegerField(null=True, blank=True, help_text="Requests per minute this deployment takes.")
    tpm = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens per minute this deployment takes.")
    prices = models.JSONField(
        null=True, blank=True, help_text="Negotiated prices of this deployment: {input: 2.4, output: 12, ...}."
    )
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["model", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["model", "provider"], name="one_deployment_per_provider")]

    def __str__(self) -> str:
        return f"{self.model} @ {self.provider}"


class Alias(models.Model):
    """A friendly name resolved to an immutable model id before anything else."""

    name = models.CharField(max_length=200, unique=True)
    target = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="aliases")

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "aliases"

    def __str__(self) -> str:
        return f"{self.name} → {self.target}"


class ProviderProbe(models.Model):
    """The last health probe result of one provider, shared between processes.

    Not configuration (saving it rebuilds nothing): `manage.py probe_providers` writes
    it, and every serving process's prober adopts newer rows into its in-memory
    results, so a one-off probe from another process reaches /health/providers and
    the dashboard (docs/operations.md#shared-probe-results). Keyed by provider name,
    one row per provider (upserted).
    """

    provider = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=8)  # up | down | unknown
    latency_ms = models.FloatField(null=True, blank=True)
    checked_at = models.DateTimeField()
    detail = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["provider"]

    def __str__(self) -> str:
        return f"{self.provider}: {self.status}"
