"""Who may call what: organisations, agents, API keys, policies, BYO credentials."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from providers.models import Provider
from routing.config.schema import PRIORITY_CLASSES

ACTIONS = [("allow", "allow"), ("deny", "deny")]
PRIORITY_CHOICES = [(c, c) for c in PRIORITY_CLASSES]
BUDGET_HELP = (
    'Spend budget, e.g. {"usd": 100, "period": "month"} (period: day, month or total; UTC). Requests are admitted '
    "while their worst-case cost fits what is left (docs/limits.md#budgets). Models without prices cost 0. Blank: none."
)


class Org(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    default_action = models.CharField(
        max_length=5, choices=ACTIONS, default="allow", help_text="Applies when no policy matches."
    )
    limits = models.JSONField(
        null=True,
        blank=True,
        help_text='Rate limits, e.g. {"rpm": 60, "tpm": 100000}: requests and tokens per minute (docs/limits.md). Blank: none.',
    )
    log_bodies = models.BooleanField(
        default=False,
        help_text="Store request and response bodies (size-capped) with this org's usage records; "
        "superusers see them in the request log (docs/operations.md#bodies). Off: never stored.",
    )
    budget = models.JSONField(
        null=True,
        blank=True,
        help_text=BUDGET_HELP,
    )
    priority = models.CharField(
        max_length=16,
        blank=True,
        choices=PRIORITY_CHOICES,
        help_text="Priority class of its agents that set none, under overload (docs/overload.md). Empty: default.",
    )
    weight = models.FloatField(
        null=True,
        blank=True,
        help_text="Share of a busy deployment against the other organisations (docs/overload.md#the-queue). Empty: 1.",
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "organisation"

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=64)
    default_model = models.CharField(
        max_length=200, blank=True, help_text="Model id or alias used when a request names none."
    )
    limits = models.JSONField(
        null=True,
        blank=True,
        help_text='Rate limits, e.g. {"rpm": 60, "tpm": 100000}: requests and tokens per minute (docs/limits.md). Blank: none.',
    )
    budget = models.JSONField(
        null=True,
        blank=True,
        help_text=BUDGET_HELP,
    )
    priority = models.CharField(
        max_length=16,
        blank=True,
        choices=PRIORITY_CHOICES,
        help_text="Priority class under overload (docs/overload.md). Empty: the org's.",
    )
    side_effects = models.BooleanField(
        default=False,
        help_text="Its calls have side effects (not idempotent): never hedged (docs/overload.md#hedging).",
    )

    class Meta:
        ordering = ["org__name", "name"]
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="agent_unique_per_org")]

    def __str__(self) -> str:
        return f"{self.org.name}/{self.name}"


class ApiKey(models.Model):
    """A key is shown once at creation; only its SHA-256 and a display prefix are kept."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    label = models.CharField("name", max_length=100, blank=True, help_text="A human name for the key.")
    note = models.TextField(
        blank=True, help_text="Who holds the key and what for (operators only; never sent anywhere)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked = models.BooleanField(default=False)
    enabled = models.BooleanField(
        default=True, help_text="Off: requests with the key get 401 invalid_api_key until it is enabled again."
    )
    limits = models.JSONField(
        null=True,
        blank=True,
        help_text='This key\'s own rate limits, e.g. {"rpm": 60, "tpm": 100000}, on top of its agent\'s and '
        "org's (docs/limits.md#keys). Blank: none.",
    )
    budget = models.JSONField(null=True, blank=True, help_text=BUDGET_HELP)
    priority = models.CharField(
        max_length=16,
        blank=True,
        choices=PRIORITY_CHOICES,
        help_text="This key's priority class under overload (docs/overload.md). Empty: its agent's.",
    )
    allowed_models = models.JSONField(
        null=True,
        blank=True,
        help_text='Allow-list of model patterns, e.g. ["fast", "gpt-*"] (Go glob, as org policies). It narrows '
        "the org's policy, never widens it (docs/limits.md#keys). Blank: every model the org allows.",
    )
    metadata = models.JSONField(
        default=dict, blank=True, help_text="Free-form JSON for your own tools; never enforced."
    )
    # Rotation (docs/management-api.md#keys): the previous secret stays valid until previous_expires_at.
    previous_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    previous_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)  # the management API's ETag

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"


class OrgPolicy(models.Model):
    """Go filepath.Match pattern over model ids; lowest priority number evaluated first."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="policies")
    pattern = models.CharField(max_length=200)
    action = models.CharField(max_length=5, choices=ACTIONS, default="allow")
    priority = models.IntegerField(default=100)
    fallback_chain = models.JSONField(
        null=True,
        blank=True,
        help_text="Allow policies only: list of model ids replacing the model's chain (at most 8). Empty list disables fallback; blank keeps the model's own chain.",
    )

    class Meta:
        ordering = ["org__name", "priority", "id"]
        verbose_name = "organisation policy"
        verbose_name_plural = "organisation policies"

    def __str__(self) -> str:
        return f"{self.org.name}: {self.action} {self.pattern} (priority {self.priority})"


class OrgCredential(models.Model):
    """Bring-your-own credentials: an org's override of a provider's key and/or base URL."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="credentials")
    provider = models.ForeignKey(Provider, on_delete=models.CASCADE, related_name="org_credentials")
    api_key_env = models.CharField(max_length=128, blank=True, help_text="Environment variable holding the org's key.")
    # Fernet ciphertext of a key entered in the admin (SWITCHBOARD_FERNET_KEY); never the key itself.
    api_key_encrypted = models.TextField(blank=True, default="", editable=False)
    base_url = models.CharField(max_length=500, blank=True, help_text="http(s) URL; empty keeps the provider's.")

    class Meta:
        ordering = ["org__name", "provider__name"]
        constraints = [models.UniqueConstraint(fields=["org", "provider"], name="credential_unique_per_org_provider")]
        verbose_name = "BYO credential"

    def __str__(self) -> str:
        return f"{self.org.name} → {self.provider.name}"


class ManagementToken(models.Model):
    """A credential for the management API (docs/management-api.md), never for /v1: shown once, kept as SHA-256.

    `scope` read may only GET; write may change keys, orgs, agents and breakers. With `org`
    set, the token sees that org's objects only and changes its keys and agents within the org's
    bounds (routing.ops.scope). Past `expires_at` it is refused like an unknown token. `bodies`, set by a superuser,
    lets it read the stored request/response bodies of the request log.
    """

    SCOPES = [("read", "read-only"), ("write", "read-write")]

    name = models.CharField(max_length=100, unique=True, help_text="Recorded as the author of the token's changes.")
    prefix = models.CharField(max_length=16, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scope = models.CharField(max_length=5, choices=SCOPES, default="read")
    org = models.ForeignKey(
        Org,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="management_tokens",
        help_text="Limit the token to this organisation. Empty: every organisation (and the breakers).",
    )
    bodies = models.BooleanField(
        default=False,
        help_text="May read stored request/response bodies in GET /api/v1/requests (docs/security.md#bodies).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="After this time (UTC) the token is refused like an unknown one (401). Empty: never expires.",
    )
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]
        verbose_name = "management token"

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}{', ' + self.org.name if self.org_id else ''})"


class OperatorScope(models.Model):
    """A staff user limited to some orgs (docs/operations.md#org-scoped-staff): every admin list and form, the
    dashboard, analytics, the request log, explain-route and the playground show that user those orgs only.

    The row itself is the limit: a user with one and no orgs (say, its only org was deleted) sees no org at
    all, never every org. Superusers are never limited.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_scope")
    orgs = models.ManyToManyField(Org, blank=True, related_name="operators", help_text="The orgs this user may see.")

    class Meta:
        verbose_name = "operator scope"

    def __str__(self) -> str:
        return f"{self.user} (org-scoped)"
