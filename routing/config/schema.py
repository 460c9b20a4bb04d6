"""The configuration schema: one table of fields per entity of the document.

Every entity of the configuration document (docs/configuration-at-scale.md#schema)
is a tuple of `Field`s: its document key, type, default, whether it is required,
the database column it is stored in, when export writes it, and which rule of
routing.config.validation checks its value. The document reader/serialiser
(routing.config.document), validation, the import writer (routing.config.store),
the snapshot builder and the admin all read these tables, so adding a field to
an entity means one row here plus its model column and migration.

Pure Python (no Django import), so the models can take their defaults from it.
The resilience defaults are the core `Resilience` dataclass's: one definition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from routing.core.admission_queue import CLASS_NAMES as PRIORITY_CLASSES
from routing.core.kinds import DIALECTS, ENDPOINT_KINDS
from routing.core.prices import CLASSES as PRICE_CLASSES
from routing.core.resilience import FALLBACK_TRIGGERS, Resilience

# `reasoning`: the model takes a reasoning setting (chat's `reasoning_effort`, a thinking budget); a Messages or
# Responses client's thinking reaches a translated link only then (routing.gateway.messages.Shape.prepare).
CAPABILITIES = (*ENDPOINT_KINDS, "streaming", "tools", "structured_output", "vision", "reasoning")
REASONING = "reasoning"
ACTIONS = ("allow", "deny")
MAX_CHAIN = 8
BUDGET_KEYS = ("usd", "period")  # an org's or agent's `budget` (docs/limits.md#budgets)
BUDGET_PERIODS = ("day", "month", "total")  # UTC calendar periods; total never resets
ROUTINGS = ("weighted", "least_busy", "latency")  # how a model picks among its deployments (docs/deployments.md)
# The one dialect table is routing.core.kinds.DIALECT_KINDS (docs/architecture.md#what-a-change-touches).
CONCURRENCY_KEYS = ("initial", "min", "max", "queue")  # a model's adaptive limit (docs/overload.md#configuration)
HEDGE_KEYS = ("budget_pct", "tools")  # a model's hedged first tokens (docs/overload.md#hedging)
AFFINITY_KEYS = ("ttl_s",)  # a model's prompt-cache affinity (docs/deployments.md#affinity)
AFFINITY_MAX_S = 86_400  # a pin outlives no provider's prompt cache by more than a day
# Alerts (docs/alerts.md): what an alert may be sent about, where to, and each destination's keys.
ALERT_EVENTS = ("breaker_open", "breaker_closed", "parked", "shedding", "degraded", "budget")
ALERT_DESTINATIONS = {"webhook": ("url", "secret_env"), "slack": ("url",), "email": ("to",)}

# When export writes a field: always, when not None, or when truthy (not None/""/False/[]).
ALWAYS, SET, TRUTHY = "always", "set", "truthy"

# How a document value is stored in its column.
TEXT = "text"  # None/absent -> ""
PLAIN = "plain"  # as is (nullable column)
DECIMAL = "decimal"  # Decimal column, plain number in the document
BOOL = "bool"
LIST = "list"  # a list; absent -> []
LIST_OR_NULL = "list_or_null"  # a non-empty list, or NULL for absent/empty (inherit)
REF = "ref"  # a foreign key, written by the import by natural key
NESTED = "nested"  # child rows (fallback links, an org's agents/policies/credentials)
SECRET = "secret"  # an encrypted column the document names only by reference; set in the admin, never imported


@dataclass(frozen=True, slots=True)
class Field:
    """One field of an entity: how it looks in the document and where it lives in the database."""

    name: str  # the document key
    type: str  # "str" | "int" | "number" | "bool" | "list" | "mapping"
    default: Any = None  # the value an absent key means
    required: bool = False
    column: str | None = ""  # model attribute ("" = same as name, None = not a plain column)
    store: str = PLAIN
    export: str = SET
    check: str | None = None  # name of a value rule in routing.config.validation.CHECKS
    choices: tuple[str, ...] = ()

    @property
    def attr(self) -> str:
        return self.column or self.name

    def to_db(self, value: Any) -> Any:
        """The column value for a document value (None when the key is absent)."""
        if value is None:
            value = self.default
        if self.store == TEXT:
            return value or ""
        if self.store == DECIMAL:
            return None if value is None else Decimal(str(value))
        if self.store == BOOL:
            return bool(value)
        if self.store == LIST:
            return list(value or [])
        if self.store == LIST_OR_NULL:
            return list(value) if value else None
        return value

    @staticmethod
    def to_doc(value: Any) -> Any:
        """The document value of a column value (Decimals and whole floats as plain numbers)."""
        if isinstance(value, Decimal):
            value = float(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        return value

    def exported(self, value: Any) -> bool:
        if self.export == ALWAYS:
            return True
        if self.export == SET:
            return value is not None
        return bool(value)


JSON, NUMBER = "json", "number"  # reader conversions


class Entity:
    """The fields of one entity, in document order, also looked up by name.

    The lists the hot loops need (names, required, fields with a value rule) are
    computed once here, not per document item.
    """

    __slots__ = ("fields", "names", "name_set", "required", "checked", "columns", "column_attrs", "_by_name")
    checked: dict[str, Field]

    def __init__(self, *fields: Field) -> None:
        self.fields = fields
        self.names = tuple(f.name for f in fields)
        self.name_set = frozenset(self.names)
        self.required = tuple(f.name for f in fields if f.required)
        self.checked = {f.name: f for f in fields if f.check}  # document key -> field with a value rule
        # Fields stored in a plain column of the entity's own table (written by the import).
        self.columns = tuple(f for f in fields if f.column is not None and f.store not in (REF, NESTED, SECRET))
        self.column_attrs = tuple(f.attr for f in self.columns)
        self._by_name = {f.name: f for f in fields}

    def __getitem__(self, name: str) -> Field:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def serialise(self, row: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
        """A database row (attribute -> value; foreign keys and nested lists in `extra`) as a document item."""
        item: dict[str, Any] = {}
        for f in self:
            value = extra[f.name] if f.name in extra else row.get(f.attr)
            if f.exported(value):
                item[f.name] = f.to_doc(value)
        return item

    def reader(self, *extras: str, decode: Callable[[str], Any] | None = None) -> Callable[..., dict[str, Any]]:
        """A fast serialiser of `.values_list(*self.column_attrs)` rows: reader(row, *extra values).

        `extras` name the fields passed after the row (foreign keys by name, nested lists),
        so the whole document is built in one pass without per-field lookups. With
        `decode`, list columns arrive as JSON text and are decoded by it.
        """
        columns = [f.name for f in self.columns]
        steps = []
        for f in self:
            if f.name in extras:
                source = len(columns) + extras.index(f.name)
            elif f.name in columns:
                source = columns.index(f.name)
            else:
                continue
            convert = JSON if decode is not None and f.type == "list" and f.name not in extras else None
            if convert is None and (f.store == DECIMAL or f.type == "number"):
                convert = NUMBER
            steps.append((f.name, source, f.export, convert))
        plan = tuple(steps)
        to_doc = Field.to_doc

        def read(row: tuple[Any, ...], *extra: Any) -> dict[str, Any]:
            values = row + extra if extra else row
            item: dict[str, Any] = {}
            for name, source, export, convert in plan:
                value = values[source]
                if convert is JSON and value is not None:
                    value = decode(value)  # type: ignore[misc]
                if export == SET:
                    if value is None:
                        continue
                elif export == TRUTHY and not value:
                    continue
                if convert is NUMBER:
                    value = to_doc(float(value) if isinstance(value, str) else value)  # decimals arrive as text
                item[name] = value
            return item

        return read

    def row_values(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The plain column values of a document item (what the import writes)."""
        return {f.attr: f.to_db(item.get(f.name)) for f in self.columns}


def _timeout(name: str) -> Field:
    return Field(name, "int", check="timeout")


TIMEOUTS = ("connect_timeout_ms", "first_token_timeout_ms", "total_timeout_ms")

PROVIDER = Entity(
    Field("name", "str", required=True, store=TEXT, export=ALWAYS, check="slug"),
    Field("dialect", "str", default="openai", store=TEXT, export=ALWAYS, check="dialect", choices=DIALECTS),
    Field("base_url", "str", required=True, store=TEXT, export=ALWAYS, check="base_url"),
    Field("api_key_env", "str", store=TEXT, export=TRUTHY, check="env_name"),
    # "stored": the key is kept encrypted in the database (docs/security.md); set only in the admin.
    Field("api_key", "str", column="api_key_encrypted", store=SECRET, export=TRUTHY, check="stored_ref"),
    *(_timeout(name) for name in TIMEOUTS),
    Field("health_check_path", "str", store=TEXT, export=TRUTHY, check="health_path"),
    Field(
        "health_probe", "bool", default=False, column="health_probe_enabled", store=BOOL, export=TRUTHY, check="bool"
    ),
)

# One deployment of a model (docs/deployments.md): a (provider, upstream model) with its weight and capacity.
DEPLOYMENT = Entity(
    Field("provider", "str", required=True, store=REF, export=ALWAYS),
    Field("upstream_model", "str", required=True, store=TEXT, export=ALWAYS),
    Field("weight", "int", default=None, check="weight"),  # absent: 1
    Field("rpm", "int", check="capacity"),
    Field("tpm", "int", check="capacity"),
    Field("prices", "mapping", export=TRUTHY, check="deployment_prices"),  # negotiated prices of this deployment
)

MODEL = Entity(
    Field("id", "str", required=True, column="public_id", store=TEXT, export=ALWAYS),
    # provider + upstream_model: the one-deployment shorthand; required unless `deployments` is given
    # (routing.config.validation). Export omits them for a model with `deployments`.
    Field("provider", "str", store=REF, export=SET),
    Field("upstream_model", "str", store=TEXT, export=TRUTHY),
    Field("routing", "str", store=TEXT, export=TRUTHY, check="routing", choices=ROUTINGS),
    Field("deployments", "list", default=(), column=None, store=NESTED, export=TRUTHY),
    Field("capabilities", "list", default=(), store=LIST, export=ALWAYS, choices=CAPABILITIES),
    Field("context_window", "int", check="tokens"),
    Field("max_output_tokens", "int", check="tokens"),
    *(_timeout(name) for name in TIMEOUTS),
    Field("residency", "str", store=TEXT, export=TRUTHY),
    Field("fallbacks", "list", default=(), column=None, store=NESTED, export=TRUTHY),
    Field("fallback_on", "list", store=LIST_OR_NULL, export=TRUTHY, check="fallback_on", choices=FALLBACK_TRIGGERS),
    Field("input_price_per_mtok", "number", store=DECIMAL, check="price"),
    Field("output_price_per_mtok", "number", store=DECIMAL, check="price"),
    # The token classes' prices (routing.core.prices; docs/configuration.md#prices): absent, priced as input/output.
    *(Field(f"{name}_price_per_mtok", "number", store=DECIMAL, check="price") for name in PRICE_CLASSES),
    # Dated price versions: [{effective_from: 2026-01-01, input: 3, ...}] (docs/configuration.md#price-versions).
    Field("prices", "list", default=(), column="price_versions", store=LIST, export=TRUTHY, check="price_versions"),
    Field("cache_ttl_s", "int", check="ttl"),  # response cache, off when absent (docs/cache.md)
    # Overload control (docs/overload.md#configuration): the adaptive limit per deployment, hedging.
    Field("concurrency", "mapping", export=TRUTHY, check="concurrency"),
    Field("hedge", "mapping", export=TRUTHY, check="hedge"),
    # Prompt-cache affinity (docs/deployments.md#affinity): {ttl_s: 300} pins a conversation to a deployment.
    Field("affinity", "mapping", export=TRUTHY, check="affinity"),
)

ALIAS = Entity(
    Field("name", "str", required=True, store=TEXT, export=ALWAYS),
    Field("target", "str", required=True, store=REF, export=ALWAYS),
)

AGENT = Entity(
    Field("name", "str", required=True, store=TEXT, export=ALWAYS, check="slug"),
    Field("default_model", "str", store=TEXT, export=TRUTHY),
    Field("limits", "mapping", export=TRUTHY, check="limits"),
    Field("budget", "mapping", export=TRUTHY, check="budget"),
    # Overload (docs/overload.md#configuration): the agent's priority class (empty: its org's), and
    # side_effects: its calls are not idempotent, so never hedged.
    Field("priority", "str", store=TEXT, export=TRUTHY, check="priority", choices=PRIORITY_CLASSES),
    Field("side_effects", "bool", default=False, store=BOOL, export=TRUTHY, check="bool"),
)

POLICY = Entity(
    Field("pattern", "str", required=True, store=TEXT, export=ALWAYS, check="pattern"),
    Field("action", "str", default="allow", store=TEXT, export=ALWAYS, check="action", choices=ACTIONS),
    Field("priority", "int", default=100, export=ALWAYS, check="int"),
    Field("fallback_chain", "list", export=SET),
)

CREDENTIAL = Entity(
    Field("provider", "str", required=True, store=REF, export=ALWAYS),
    Field("api_key_env", "str", store=TEXT, export=TRUTHY, check="env_name"),
    Field("api_key", "str", column="api_key_encrypted", store=SECRET, export=TRUTHY, check="stored_ref"),
    Field("base_url", "str", store=TEXT, export=TRUTHY, check="base_url"),
)

ORG = Entity(
    Field("name", "str", required=True, store=TEXT, export=ALWAYS, check="slug"),
    Field("default_action", "str", default="allow", store=TEXT, export=ALWAYS, check="action", choices=ACTIONS),
    Field("limits", "mapping", export=TRUTHY, check="limits"),
    # Store request/response bodies with the org's usage records (docs/operations.md#bodies).
    Field("log_bodies", "bool", default=False, store=BOOL, export=TRUTHY, check="bool"),
    Field("budget", "mapping", export=TRUTHY, check="budget"),
    # Overload (docs/overload.md#configuration): the class of its agents that set none (empty: default),
    # and its share of a busy deployment against the other orgs (absent: 1).
    Field("priority", "str", store=TEXT, export=TRUTHY, check="priority", choices=PRIORITY_CLASSES),
    Field("weight", "number", check="share"),
    Field("agents", "list", column=None, store=NESTED, export=TRUTHY),
    Field("policies", "list", column=None, store=NESTED, export=TRUTHY),
    Field("credentials", "list", column=None, store=NESTED, export=TRUTHY),
)

# Checks of the resilience values (routing.config.validation.CHECKS), by setting.
_RESILIENCE_CHECKS = {
    "max_retries": "retries",
    "fallback_max_depth": "depth",
    "breaker_failure_threshold": "threshold",
    "breaker_cooldown_s": "cooldown",
    "fallback_on": "fallback_on",
    "retry_budget_ratio": "ratio",
    "retry_budget_min_per_s": "min_per_s",
    "quota_park_s": "park",
}


def _resilience_field(f: dataclasses.Field) -> Field:
    default = f.default
    if f.name == "fallback_on":  # a set in the core; an ordered list in the document
        return Field(f.name, "list", default=[t for t in FALLBACK_TRIGGERS if t in default], store=LIST,
                     export=ALWAYS, check="fallback_on", choices=FALLBACK_TRIGGERS)  # fmt: skip
    kind = "int" if f.type in ("int", int) else "number"
    check = "timeout" if f.name.endswith("_ms") else _RESILIENCE_CHECKS.get(f.name)
    if isinstance(default, float) and default.is_integer():
        default = int(default)  # the document writes 30, not 30.0
    return Field(f.name, kind, default=default, export=ALWAYS, check=check)


RESILIENCE = Entity(*(_resilience_field(f) for f in dataclasses.fields(Resilience)))

# Setting -> default, in document order (a fresh copy: callers may keep it).
RESILIENCE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in RESILIENCE}

# One alert rule (docs/alerts.md): exactly one destination, the events it wants, budget thresholds in percent.
ALERT = Entity(
    Field("name", "str", required=True, store=TEXT, export=ALWAYS, check="slug"),
    *(Field(kind, "mapping", export=SET) for kind in ALERT_DESTINATIONS),
    Field("events", "list", default=(), store=LIST, export=TRUTHY, choices=ALERT_EVENTS),
    Field("budget_percent", "list", default=(), store=LIST, export=TRUTHY),
)

TOP_KEYS = ("resilience", "providers", "models", "aliases", "orgs", "alerts")

ENTITIES: dict[str, Entity] = {
    "resilience": RESILIENCE,
    "provider": PROVIDER,
    "model": MODEL,
    "alias": ALIAS,
    "org": ORG,
    "agent": AGENT,
    "policy": POLICY,
    "credential": CREDENTIAL,
    "deployment": DEPLOYMENT,
    "alert": ALERT,
}


def resilience_values(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The full resilience settings: the document's over the defaults."""
    return {**RESILIENCE_DEFAULTS, **(raw or {})}


def core_resilience(raw: Mapping[str, Any] | None) -> Resilience:
    """The executor's value type, coerced from the document's settings."""
    values = resilience_values(raw)
    out: dict[str, Any] = {}
    for f in RESILIENCE:
        value = values[f.name]
        out[f.name] = frozenset(value) if f.type == "list" else int(value) if f.type == "int" else float(value)
    return Resilience(**out)
