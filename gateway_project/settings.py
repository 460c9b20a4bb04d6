"""Switchboard settings: every knob read from the environment with django-environ.

Defaults give a working single-process gateway (SQLite, in-memory channel layer);
production sets DATABASE_URL (PostgreSQL) and REDIS_URL.
"""

from __future__ import annotations

import ipaddress
import os
import warnings
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

# Security ---------------------------------------------------------------------
SECRET_KEY = env.str("SECRET_KEY", default="dev-insecure-switchboard-key-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# Proxies whose X-Forwarded-For names the client in audit records (docs/production.md#client-address);
# each an address or a network, checked here so that a typo stops the start rather than trusting nothing.
SWITCHBOARD_TRUSTED_PROXIES = [
    str(ipaddress.ip_network(v, strict=False)) for v in env.list("SWITCHBOARD_TRUSTED_PROXIES", default=[])
]

# Storage ----------------------------------------------------------------------
# Seconds a connection to the database may take (PostgreSQL connect_timeout): a database that
# never answers fails the boot fast, which then serves the last good snapshot (docs/security.md#server-edge).
SWITCHBOARD_DB_CONNECT_TIMEOUT_S = env.int("SWITCHBOARD_DB_CONNECT_TIMEOUT_S", default=3)
DATABASES = {
    # SQLite file in the project unless DATABASE_URL says otherwise.
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'switchboard.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the usage writer and the admin write while the gateway reads.
    DATABASES["default"].setdefault("OPTIONS", {})["init_command"] = "PRAGMA journal_mode=WAL;"
    DATABASES["default"]["OPTIONS"]["timeout"] = 20
    # Take the write lock at BEGIN: a deferred transaction that later writes fails at once
    # with "database is locked" (no busy wait) when another process wrote meanwhile.
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    # A file (not :memory:) so end-to-end servers could share it; per process so parallel runs never collide.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-switchboard-{os.getpid()}.sqlite3")}
elif DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql"):
    # Bounded connect on every connection (boot, usage writer, admin): the libpq default waits for
    # the TCP timeout, minutes against a host that accepts and never answers.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", SWITCHBOARD_DB_CONNECT_TIMEOUT_S)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis is optional: the channel layer (multi-process reload, dashboard fan-out)
# and the shared idempotency store use it when set.
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# Processes that share breakers over Redis (docs/scale-out.md#shared-breakers) and are listed
# together on the dashboard (docs/scale-out.md#processes); default: those on the same
# configuration database.
SWITCHBOARD_CLUSTER = env.str("SWITCHBOARD_CLUSTER", default="")

# Gateway ----------------------------------------------------------------------
# Request bodies over this many bytes get 413 request_too_large.
SWITCHBOARD_MAX_BODY_BYTES = env.int("SWITCHBOARD_MAX_BODY_BYTES", default=10 * 1024 * 1024)
# The Django side (admin, dashboard, /metrics) refuses bodies over this many bytes with 413, before
# reading them (docs/security.md#server-edge); its forms are small.
SWITCHBOARD_MAX_PAGE_BODY_BYTES = env.int("SWITCHBOARD_MAX_PAGE_BODY_BYTES", default=1024 * 1024)
# Slow clients (docs/security.md#server-edge), both servers: a request head must be complete this
# long after its first byte, a body must bring at least SWITCHBOARD_BODY_MIN_BYTES more (or end) in
# every window of SWITCHBOARD_BODY_TIMEOUT_S, an idle keep-alive connection is closed after this long.
SWITCHBOARD_HEAD_TIMEOUT_S = env.float("SWITCHBOARD_HEAD_TIMEOUT_S", default=10.0)
SWITCHBOARD_BODY_TIMEOUT_S = env.float("SWITCHBOARD_BODY_TIMEOUT_S", default=10.0)
SWITCHBOARD_BODY_MIN_BYTES = env.int("SWITCHBOARD_BODY_MIN_BYTES", default=1024)
SWITCHBOARD_KEEPALIVE_S = env.float("SWITCHBOARD_KEEPALIVE_S", default=5.0)
# Connections one process holds at most (0: the file-descriptor limit less SWITCHBOARD_RESERVED_FDS,
# the descriptors kept for the usage journal, spool, database and Redis; never more than that).
SWITCHBOARD_MAX_CONNECTIONS = env.int("SWITCHBOARD_MAX_CONNECTIONS", default=0)
SWITCHBOARD_RESERVED_FDS = env.int("SWITCHBOARD_RESERVED_FDS", default=256)
# Requests that start their work per event-loop pass; a burst beyond waits for the next passes,
# so /health and open sockets are served between (docs/performance.md#pacing). 0: no pacing.
SWITCHBOARD_REQUESTS_PER_TICK = env.int("SWITCHBOARD_REQUESTS_PER_TICK", default=32)
# /metrics is public unless this is false; then only staff sessions may read it.
SWITCHBOARD_METRICS_PUBLIC = env.bool("SWITCHBOARD_METRICS_PUBLIC", default=True)
# Organisation names in /metrics labels (org=, "<model>@<org>"); off: a keyed hash instead (docs/security.md#metrics).
SWITCHBOARD_METRICS_ORG_NAMES = env.bool("SWITCHBOARD_METRICS_ORG_NAMES", default=False)
# How often each process checks the configuration version (safety net for missed broadcasts).
SWITCHBOARD_CONFIG_POLL_S = env.float("SWITCHBOARD_CONFIG_POLL_S", default=0.5)
# Alerts (docs/alerts.md#settings): dedupe window, delivery attempts and backoff, timeout, budget checks, queue.
SWITCHBOARD_ALERT_DEDUPE_S = env.float("SWITCHBOARD_ALERT_DEDUPE_S", default=60.0)
SWITCHBOARD_ALERT_ATTEMPTS = env.int("SWITCHBOARD_ALERT_ATTEMPTS", default=5)
SWITCHBOARD_ALERT_BACKOFF_S = env.float("SWITCHBOARD_ALERT_BACKOFF_S", default=1.0)
SWITCHBOARD_ALERT_TIMEOUT_S = env.float("SWITCHBOARD_ALERT_TIMEOUT_S", default=5.0)
SWITCHBOARD_ALERT_BUDGET_CHECK_S = env.float("SWITCHBOARD_ALERT_BUDGET_CHECK_S", default=0.5)
SWITCHBOARD_ALERT_QUEUE = env.int("SWITCHBOARD_ALERT_QUEUE", default=1000)
# Background health probes of providers; off unless enabled here or per provider.
SWITCHBOARD_HEALTH_PROBES = env.bool("SWITCHBOARD_HEALTH_PROBES", default=False)
SWITCHBOARD_HEALTH_INTERVAL_S = env.float("SWITCHBOARD_HEALTH_INTERVAL_S", default=30.0)
# How often a serving process adopts probe results stored by other processes (0: never).
SWITCHBOARD_HEALTH_SHARED_POLL_S = env.float("SWITCHBOARD_HEALTH_SHARED_POLL_S", default=2.0)
# Usage records: batch size, in-memory bound before spilling to the spool file.
SWITCHBOARD_USAGE_BATCH = env.int("SWITCHBOARD_USAGE_BATCH", default=500)
SWITCHBOARD_USAGE_MEMORY_BOUND = env.int("SWITCHBOARD_USAGE_MEMORY_BOUND", default=10_000)
SWITCHBOARD_USAGE_FLUSH_S = env.float("SWITCHBOARD_USAGE_FLUSH_S", default=0.5)
SWITCHBOARD_USAGE_SPOOL_DIR = env.str("SWITCHBOARD_USAGE_SPOOL_DIR", default=str(VAR_DIR / "spool"))
# Price versions `manage.py sync_prices` proposes, until accepted or rejected (docs/commands.md#sync_prices).
SWITCHBOARD_PRICE_PROPOSALS_FILE = env.str(
    "SWITCHBOARD_PRICE_PROPOSALS_FILE", default=str(VAR_DIR / "price-proposals.json")
)
# How often the dashboard pushes refreshed counters to open pages.
SWITCHBOARD_DASHBOARD_REFRESH_S = env.float("SWITCHBOARD_DASHBOARD_REFRESH_S", default=1.5)
# Every serving process's heartbeat for the dashboard's process list (docs/scale-out.md#processes).
SWITCHBOARD_HEARTBEAT_S = env.float("SWITCHBOARD_HEARTBEAT_S", default=1.0)
SWITCHBOARD_REPLICA = env.str("SWITCHBOARD_REPLICA", default="")  # a name for this replica in that list
# Idempotency records live this long.
SWITCHBOARD_IDEMPOTENCY_TTL_S = env.int("SWITCHBOARD_IDEMPOTENCY_TTL_S", default=24 * 3600)
# Response cache (docs/cache.md#storage): the in-memory LRU's bounds, the largest stored answer,
# and how long a request waits for Redis before it is served without the cache.
SWITCHBOARD_CACHE_MAX_ENTRIES = env.int("SWITCHBOARD_CACHE_MAX_ENTRIES", default=10_000)
SWITCHBOARD_CACHE_MAX_BYTES = env.int("SWITCHBOARD_CACHE_MAX_BYTES", default=64 * 1024 * 1024)
SWITCHBOARD_CACHE_MAX_ENTRY_BYTES = env.int("SWITCHBOARD_CACHE_MAX_ENTRY_BYTES", default=1024 * 1024)
SWITCHBOARD_CACHE_REDIS_TIMEOUT_MS = env.float("SWITCHBOARD_CACHE_REDIS_TIMEOUT_MS", default=100.0)
# Validate the routing configuration when the ASGI app is built (refuse to start on errors).
SWITCHBOARD_VALIDATE_ON_BOOT = env.bool("SWITCHBOARD_VALIDATE_ON_BOOT", default=True)

# Secrets (docs/security.md#secrets): configuration may name only environment variables
# with this prefix, or listed here (comma-separated), as upstream keys.
SWITCHBOARD_SECRET_ENV_PREFIX = env.str("SWITCHBOARD_SECRET_ENV_PREFIX", default="SWITCHBOARD_UPSTREAM_")
SWITCHBOARD_SECRET_ENV_ALLOW = env.str("SWITCHBOARD_SECRET_ENV_ALLOW", default="")
# Fernet key that encrypts upstream keys stored in the database (empty: storing keys is off).
SWITCHBOARD_FERNET_KEY = env.str("SWITCHBOARD_FERNET_KEY", default="")
# Header limits of the uvicorn + httptools server (docs/security.md#header-limits): 431 above them.
SWITCHBOARD_MAX_HEADER_BYTES = env.int("SWITCHBOARD_MAX_HEADER_BYTES", default=64 * 1024)
SWITCHBOARD_MAX_HEADERS = env.int("SWITCHBOARD_MAX_HEADERS", default=100)
# Configuration versions kept in the history (docs/config-history.md#retention); 0 records none.
SWITCHBOARD_CONFIG_HISTORY_KEEP = env.int("SWITCHBOARD_CONFIG_HISTORY_KEEP", default=100)
# OpenTelemetry tracing (docs/tracing.md): off unless an OTLP/HTTP endpoint is set (the standard variables).
SWITCHBOARD_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
SWITCHBOARD_OTLP_TRACES_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default="")
SWITCHBOARD_OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="switchboard")
# Timeout of calls to Redis off the request path (config broadcast on save, dashboard publish).
SWITCHBOARD_SHARED_TIMEOUT_S = env.float("SWITCHBOARD_SHARED_TIMEOUT_S", default=1.0)
# Interval of the background round that leases shares of the budgets from Redis (docs/limits.md#shared).
SWITCHBOARD_LIMITS_SYNC_S = env.float("SWITCHBOARD_LIMITS_SYNC_S", default=0.2)
# How often the usage spool file is fsynced (bound of records lost to a power loss).
SWITCHBOARD_USAGE_FSYNC_S = env.float("SWITCHBOARD_USAGE_FSYNC_S", default=1.0)

# Blocking calls of upstreams, each kind on a small pool of its own (docs/security.md#blocking): Vertex AI
# token exchanges (google-auth; its socket timeout) and upstream host-name lookups.
SWITCHBOARD_TOKEN_EXCHANGE_THREADS = env.int("SWITCHBOARD_TOKEN_EXCHANGE_THREADS", default=4)
SWITCHBOARD_TOKEN_EXCHANGE_TIMEOUT_S = env.float("SWITCHBOARD_TOKEN_EXCHANGE_TIMEOUT_S", default=10.0)
SWITCHBOARD_RESOLVE_THREADS = env.int("SWITCHBOARD_RESOLVE_THREADS", default=4)
SWITCHBOARD_RESOLVE_TIMEOUT_S = env.float("SWITCHBOARD_RESOLVE_TIMEOUT_S", default=5.0)
# The upstream address guard (docs/security.md#addresses): the link-local / cloud metadata range is always
# refused; false also refuses loopback and private addresses in base_url and token_uri.
SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE = env.bool("SWITCHBOARD_UPSTREAM_ALLOW_PRIVATE", default=True)

# Request and response bodies in the request log: off unless an org sets log_bodies, or
# this for every org; cut to SWITCHBOARD_LOG_BODY_BYTES (docs/operations.md#bodies).
SWITCHBOARD_LOG_BODIES = env.bool("SWITCHBOARD_LOG_BODIES", default=False)
SWITCHBOARD_LOG_BODY_BYTES = env.int("SWITCHBOARD_LOG_BODY_BYTES", default=16384)

# Django -----------------------------------------------------------------------
INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_prometheus",
    "drf_spectacular_sidecar",  # Swagger UI's static files for /reference/ (no DRF: static only)
    "providers",
    "policies",
    "routing",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Admin CSS/JS under any ASGI server, no collectstatic step (Django side only; /v1 never sees it).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Admin writes: one transaction and one configuration-history revision per POST, by the user.
    "routing.ops.history_middleware.ConfigAuthorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "gateway_project.urls"
ASGI_APPLICATION = "gateway_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "routing.ops.sso.login_context",  # the login page's SSO button (docs/sso.md)
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # only for `collectstatic`; WhiteNoise serves from the finders
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
LOGIN_URL = "/admin/login/"

# Single sign-on (docs/sso.md): OpenID Connect for the admin and the staff pages, on when an issuer is set.
SWITCHBOARD_OIDC_ISSUER = env.str("SWITCHBOARD_OIDC_ISSUER", default="").rstrip("/")
SWITCHBOARD_OIDC_GROUPS_CLAIM = env.str("SWITCHBOARD_OIDC_GROUPS_CLAIM", default="groups")
SWITCHBOARD_OIDC_SUPERUSER_GROUP = env.str("SWITCHBOARD_OIDC_SUPERUSER_GROUP", default="")
SWITCHBOARD_OIDC_ORG_PREFIX = env.str("SWITCHBOARD_OIDC_ORG_PREFIX", default="org:")
SWITCHBOARD_PASSWORD_LOGIN = env.bool("SWITCHBOARD_PASSWORD_LOGIN", default=True)
if SWITCHBOARD_OIDC_ISSUER:
    INSTALLED_APPS.append("mozilla_django_oidc")
    OIDC_RP_CLIENT_ID = env.str("SWITCHBOARD_OIDC_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env.str("SWITCHBOARD_OIDC_CLIENT_SECRET", default="")
    OIDC_RP_SIGN_ALGO = env.str("SWITCHBOARD_OIDC_SIGN_ALGO", default="RS256")
    OIDC_RP_SCOPES = env.str("SWITCHBOARD_OIDC_SCOPES", default="openid email profile")
    OIDC_USE_PKCE = True
    OIDC_USE_NONCE = True
    OIDC_AUTHENTICATE_CLASS = "routing.ops.sso.SwitchboardAuthenticationRequestView"
    LOGIN_REDIRECT_URL = "/admin/"
    LOGIN_REDIRECT_URL_FAILURE = "/admin/login/?sso=failed"
    LOGOUT_REDIRECT_URL = "/admin/login/"
    # The ID token stays in the session for the provider's logout (its id_token_hint); endpoint from discovery.
    OIDC_STORE_ID_TOKEN = True
    OIDC_OP_LOGOUT_URL_METHOD = "routing.ops.sso.provider_logout_url"
    OIDC_TIMEOUT = 10  # seconds, every call to the provider (token, userinfo, keys)
# Without an issuer the password is the only way in, whatever SWITCHBOARD_PASSWORD_LOGIN says.
AUTHENTICATION_BACKENDS = [
    *(["routing.ops.sso.SwitchboardOIDCBackend"] if SWITCHBOARD_OIDC_ISSUER else []),
    *(
        ["django.contrib.auth.backends.ModelBackend"]
        if SWITCHBOARD_PASSWORD_LOGIN or not SWITCHBOARD_OIDC_ISSUER
        else []
    ),
]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(message)s"}},
    "handlers": {"console": {"class": "gateway_project.log.StderrHandler", "formatter": "plain"}},
    "loggers": {
        "switchboard": {"handlers": ["console"], "level": env.str("SWITCHBOARD_LOG_LEVEL", default="INFO")},
        "httpx": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # A 500 on the Django side (admin, staff pages, single sign-on) is logged with its traceback.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "switchboard.requests": {
            "handlers": ["console"],
            "level": env.str("SWITCHBOARD_REQUEST_LOG_LEVEL", default="INFO"),
            "propagate": False,
        },
    },
}

(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)
# WhiteNoise hands Django file iterators; under ASGI Django warns on each static file.
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous iterators")
