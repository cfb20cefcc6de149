"""Gateway settings, read from the environment (docs/reference/environment.md).

Every variable goes through one of the small helpers below, which raise
ImproperlyConfigured with the variable's name on a bad value.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.core.validators import slug_re

from gateway import paths
from gateway.version import __version__
from gateway_utils.addresses import AllowList

BASE_DIR = paths.SOURCE_ROOT
# Run from a clone, or installed from the wheel (gateway/paths.py).
GATEWAY_CHECKOUT = paths.IS_CHECKOUT
VAR_DIR = paths.var_dir()
VAR_DIR.mkdir(parents=True, exist_ok=True)
GATEWAY_VERSION = __version__
# The config `approval-gateway run` (`make run`) applies: a web channel and a demo agent.
GATEWAY_DEMO_CONFIG = paths.demo_config()


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be 0/1/true/false, got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def env_list(name: str) -> tuple[str, ...]:
    """A comma-separated list; empty entries dropped."""
    return tuple(item.strip() for item in (os.environ.get(name) or "").split(",") if item.strip())


def _secret_key() -> str:
    configured = env_str("GATEWAY_SECRET_KEY")
    if configured:
        return configured
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("GATEWAY_DEBUG", False)
ALLOWED_HOSTS = ["*"]
GATEWAY_PUBLIC_URL = (env_str("GATEWAY_PUBLIC_URL", "http://127.0.0.1:8000") or "").rstrip("/")
GATEWAY_CONFIG = env_str("GATEWAY_CONFIG")
CSRF_TRUSTED_ORIGINS = [GATEWAY_PUBLIC_URL]

# --- HTTPS (docs/operating.md, "Production settings") ------------------------
# On when the public URL is https: the gateway then sits behind a TLS-terminating proxy that sets
# X-Forwarded-Proto (and overwrites any the client sent). Cookies are sent over HTTPS only, plain HTTP
# is redirected (but the health probes, which load balancers send over HTTP) and browsers are told
# to keep to HTTPS (HSTS). `manage.py check --deploy` is clean with it on.
GATEWAY_HTTPS = env_bool("GATEWAY_HTTPS", GATEWAY_PUBLIC_URL.startswith("https://"))
if GATEWAY_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("GATEWAY_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("GATEWAY_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GATEWAY_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("GATEWAY_HSTS_PRELOAD", True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "approvals",
    "hooks",
    "channels_ext",
]

MIDDLEWARE = [
    "approvals.api.middleware.api_errors_as_json",  # first: it sees every answer, Django's own error pages too
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Django's database sessions, read by a prepared statement (gateway.sessions.py).
SESSION_ENGINE = "gateway.sessions"

ROOT_URLCONF = "gateway.urls"
ASGI_APPLICATION = "gateway.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The project's own overrides (the admin's sign-in page, its index linking the oversight page); each
        # app's templates are in its `templates/` folder (APP_DIRS), so the installed wheel has them all.
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "channels_ext.web.sign_in.sign_in_options",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
POSTGRES_ENGINE = "gateway.postgresql"
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gateway.sqlite3'}")


def _postgres_multi_host(url: str) -> dict:
    """A PostgreSQL URL naming several hosts (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`),
    read by libpq itself: dj-database-url takes one host only. Django hands HOST and PORT (comma-separated
    lists) and the other parameters to psycopg as they are, and libpq tries the hosts in turn."""
    from psycopg.conninfo import conninfo_to_dict

    params = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
    }


try:
    _scheme, _, _rest = DATABASE_URL.partition("://")
    if _scheme in ("postgres", "postgresql") and "," in _rest.partition("/")[0]:
        _db = _postgres_multi_host(DATABASE_URL)
    else:
        _db = dj_database_url.parse(DATABASE_URL)
except Exception as exc:  # dj-database-url and libpq raise several types on junk
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + IMMEDIATE transactions let the server, worker and beat share one file.
    _db.setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, whose pool lends only connections the server has not closed: after a restart, a
    # failover or pg_terminate_backend no request meets a dead one (gateway/postgresql/base.py).
    _db["ENGINE"] = POSTGRES_ENGINE
    # Django's psycopg pool: async code paths borrow a connection per read and give it back.
    _db["CONN_MAX_AGE"] = 0
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": env_int("GATEWAY_DB_POOL_SIZE", 20),
        "timeout": 10,
    }
    # Prepared statements: a statement this process has sent GATEWAY_DB_PREPARE_AFTER times on a
    # connection is prepared there (psycopg's own counting; Django's server-side binding), and is then
    # neither parsed nor planned again — a decision's dozen statements each save ~0.1–0.3 ms of the
    # database's time. 0 turns it off (client-side binding, Django's default): for PgBouncer in
    # transaction mode older than 1.21 (docs/operating.md, "Scaling each").
    _prepare_after = env_int("GATEWAY_DB_PREPARE_AFTER", 5)
    if _prepare_after < 0:
        raise ImproperlyConfigured(f"GATEWAY_DB_PREPARE_AFTER must be 0 or more, got {_prepare_after}")
    if _prepare_after:
        _db["OPTIONS"].update({"server_side_binding": True, "prepare_threshold": _prepare_after})
DATABASES = {"default": _db}
IS_POSTGRES = _db["ENGINE"] == POSTGRES_ENGINE
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, channel layer, Celery -----------------------------------------
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("GATEWAY_CHANNEL_PREFIX", "gateway")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The embedded broker for `make run`: kombu's SQLAlchemy transport on a SQLite file
# shared by server, worker and beat (kombu's filesystem transport can read
# half-written messages and crash the worker: celery/kombu#1551).
CELERY_BROKER_URL = (
    env_str("CELERY_BROKER_URL") or REDIS_URL or f"sqla+sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
)
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A worker's BRPOP answers as soon as a task arrives; only an idle worker notices the timeout (kombu's
    # default 1 s): waking every 5 s instead costs no task any time, and halves an idle worker's wake-ups.
    # (A worker told to stop notices at its next wake: a warm shutdown takes up to 5 s longer.)
    CELERY_BROKER_TRANSPORT_OPTIONS["polling_interval"] = 5
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# How often beat runs the timers (reminders, warnings before the deadline, escalations): their resolution.
# A gate's `warn_before_seconds` must be at least twice this (hooks/builtin/approval_gate.py).
GATEWAY_TIMERS_INTERVAL_SECONDS = env_int("GATEWAY_TIMERS_INTERVAL_SECONDS", 5)
if GATEWAY_TIMERS_INTERVAL_SECONDS < 1:
    raise ImproperlyConfigured(f"GATEWAY_TIMERS_INTERVAL_SECONDS must be >= 1, got {GATEWAY_TIMERS_INTERVAL_SECONDS}")
# Beat sends one task this often, `approvals.tasks.tick`, which runs what is due of the periodic work: the
# expiry sweep every tick, the outbox's relay every 5 s, the timers every GATEWAY_TIMERS_INTERVAL_SECONDS, the
# channels' digests every 30 s — one message and one task where there were three schedules (docs/operating.md).
GATEWAY_TICK_SECONDS = min(2, GATEWAY_TIMERS_INTERVAL_SECONDS)
CELERY_BEAT_SCHEDULE = {"gateway-tick": {"task": "approvals.tasks.tick", "schedule": float(GATEWAY_TICK_SECONDS)}}
# A tick that leaves nothing due within the rest lets beat skip the ticks of this many seconds, until a worker's next
# delivery or the commit of a request with a deadline or timer within the rest (gateway_utils.tick_rest;
# Redis brokers only). 0: the tick never rests.
GATEWAY_TICK_REST_SECONDS = env_int("GATEWAY_TICK_REST_SECONDS", 30)
if GATEWAY_TICK_REST_SECONDS < 0:
    raise ImproperlyConfigured(f"GATEWAY_TICK_REST_SECONDS must be 0 or more, got {GATEWAY_TICK_REST_SECONDS}")
# How much lower than the server's the CPU priority of `celery worker` and `celery beat` is (their `nice`,
# 0-19; gateway/celery.py): on a machine they share with the server, a tick or a delivery waits for a
# click's or an agent's request in progress rather than stretching it. 0: the same priority.
GATEWAY_WORKER_NICE = env_int("GATEWAY_WORKER_NICE", 10)
if not 0 <= GATEWAY_WORKER_NICE <= 19:
    raise ImproperlyConfigured(f"GATEWAY_WORKER_NICE must be between 0 and 19, got {GATEWAY_WORKER_NICE}")
# Beat's scheduler: celery's, which asks `tick_rest` before sending the tick (gateway/beat.py).
CELERY_BEAT_SCHEDULER = "gateway.beat:Scheduler"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Gateway behaviour -----------------------------------------------------
GATEWAY_WAIT_MAX_SECONDS = env_int("GATEWAY_WAIT_MAX_SECONDS", 60)
GATEWAY_WAIT_RECHECK_SECONDS = env_int("GATEWAY_WAIT_RECHECK_SECONDS", 5)
GATEWAY_OUTBOX_RELAY_AFTER_SECONDS = env_int("GATEWAY_OUTBOX_RELAY_AFTER_SECONDS", 10)
GATEWAY_OUTBOX_MAX_ATTEMPTS = env_int("GATEWAY_OUTBOX_MAX_ATTEMPTS", 8)
GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS = env_int("GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS", 86400)
# The longest a server process serves what it cached of a key, an agent or a session without reading the
# database again: a change made behind the services' back (SQL) takes effect within it (docs/architecture.md).
GATEWAY_CACHE_MAX_AGE_SECONDS = env_int("GATEWAY_CACHE_MAX_AGE_SECONDS", 5)
if GATEWAY_CACHE_MAX_AGE_SECONDS < 0:
    raise ImproperlyConfigured(f"GATEWAY_CACHE_MAX_AGE_SECONDS must be 0 or more, got {GATEWAY_CACHE_MAX_AGE_SECONDS}")
# The largest request body any route reads: a larger one is refused (413) before it is read (docs/reference/api.md).
# `/metrics` answers only a scraper sending `Authorization: Bearer <this>`; unset: /metrics is off (404).
GATEWAY_METRICS_TOKEN = env_str("GATEWAY_METRICS_TOKEN", "") or ""
# An approver's answer sooner than this after the card was shown was given faster than the card can be
# read: counted as "fast" on the oversight page and in gateway_fast_decisions (docs/web-and-admin.md, "Oversight").
GATEWAY_OVERSIGHT_FAST_SECONDS = env_int("GATEWAY_OVERSIGHT_FAST_SECONDS", 3)
if GATEWAY_OVERSIGHT_FAST_SECONDS < 0:
    raise ImproperlyConfigured(f"GATEWAY_OVERSIGHT_FAST_SECONDS must be 0 or more, got {GATEWAY_OVERSIGHT_FAST_SECONDS}")

GATEWAY_MAX_BODY_BYTES = env_int("GATEWAY_MAX_BODY_BYTES", 1024 * 1024)
if GATEWAY_MAX_BODY_BYTES < 1024:
    raise ImproperlyConfigured(f"GATEWAY_MAX_BODY_BYTES must be at least 1024 (bytes), got {GATEWAY_MAX_BODY_BYTES}")
# Retention (docs/audit.md): 0 keeps everything; N > 0 makes beat purge records older than N days, daily.
GATEWAY_RETENTION_DAYS = env_int("GATEWAY_RETENTION_DAYS", 0)
if GATEWAY_RETENTION_DAYS < 0:
    raise ImproperlyConfigured(
        f"GATEWAY_RETENTION_DAYS must be 0 (keep everything) or a number of days, got {GATEWAY_RETENTION_DAYS}"
    )
if GATEWAY_RETENTION_DAYS:
    CELERY_BEAT_SCHEDULE["purge-old-records"] = {"task": "approvals.tasks.purge_old_records", "schedule": 86400.0}

# The audit key (docs/audit.md): HMAC-SHA256 keys that sign the audit chain and every decision row.
# Never stored in the database. GATEWAY_AUDIT_KEY is `<key id>:<secret>` (new entries are signed with it);
# GATEWAY_AUDIT_OLD_KEYS lists retired keys the same way, comma-separated, for verifying what they signed.
# Without GATEWAY_AUDIT_KEY a development key (id `dev-insecure`, published here) is used: the
# `approvals.E001` system check (run by `migrate`, `check` and at server start-up) refuses it unless
# GATEWAY_ALLOW_DEV_AUDIT_KEY is on (`make run` and the tests turn it on).
GATEWAY_AUDIT_DEV_KEY_ID = "dev-insecure"
_DEV_AUDIT_KEY = f"{GATEWAY_AUDIT_DEV_KEY_ID}:development key, published in the source: not a secret"


def _audit_keys() -> tuple[str, dict[str, bytes]]:
    def parse(name: str, value: str) -> tuple[str, bytes]:
        key_id, sep, secret = value.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id or not secret or len(key_id) > 32 or "|" in key_id:
            raise ImproperlyConfigured(f"{name} must be `<key id>:<secret>` (a key id of at most 32 characters)")
        if key_id != GATEWAY_AUDIT_DEV_KEY_ID and len(secret) < 32:
            raise ImproperlyConfigured(f"{name}: the secret of key {key_id!r} must be at least 32 characters")
        return key_id, secret.encode()

    current_id, current = parse("GATEWAY_AUDIT_KEY", env_str("GATEWAY_AUDIT_KEY", _DEV_AUDIT_KEY) or "")
    keys = {current_id: current}
    for item in env_list("GATEWAY_AUDIT_OLD_KEYS"):
        key_id, secret = parse("GATEWAY_AUDIT_OLD_KEYS", item)
        if key_id in keys:
            raise ImproperlyConfigured(f"GATEWAY_AUDIT_OLD_KEYS: key id {key_id!r} is listed twice")
        keys[key_id] = secret
    return current_id, keys


GATEWAY_AUDIT_KEY_ID, GATEWAY_AUDIT_KEYS = _audit_keys()
GATEWAY_ALLOW_DEV_AUDIT_KEY = env_bool("GATEWAY_ALLOW_DEV_AUDIT_KEY", False)
# Beat records every chain's head this often (seconds; 0: never) in GATEWAY_AUDIT_HEADS_FILE and the log,
# outside the chain, for `verify_audit --expect-head` to catch a truncated tail (docs/audit.md).
GATEWAY_AUDIT_CHECKPOINT_SECONDS = env_int("GATEWAY_AUDIT_CHECKPOINT_SECONDS", 300)
GATEWAY_AUDIT_HEADS_FILE = env_str("GATEWAY_AUDIT_HEADS_FILE", str(VAR_DIR / "audit-heads.jsonl"))
if GATEWAY_AUDIT_CHECKPOINT_SECONDS < 0:
    raise ImproperlyConfigured(f"GATEWAY_AUDIT_CHECKPOINT_SECONDS must be 0 or more, got {GATEWAY_AUDIT_CHECKPOINT_SECONDS}")
if GATEWAY_AUDIT_CHECKPOINT_SECONDS:
    CELERY_BEAT_SCHEDULE["audit-checkpoint"] = {
        "task": "approvals.tasks.audit_checkpoint",
        "schedule": float(GATEWAY_AUDIT_CHECKPOINT_SECONDS),
    }

# Networks and host names the gateway may call on someone's behalf although they are not public
# (callback_url, webhook hooks, inject_tool_result and MCP sources): CIDRs, addresses, host names.
GATEWAY_OUTBOUND_ALLOW = env_list("GATEWAY_OUTBOUND_ALLOW")
try:
    AllowList.parse(GATEWAY_OUTBOUND_ALLOW)
except ValueError as exc:
    raise ImproperlyConfigured(f"GATEWAY_OUTBOUND_ALLOW: {exc}") from None

# --- Sign-in with the organisation's identity provider (OpenID Connect) ----
# Off unless GATEWAY_OIDC_CLIENT_ID is set; then the issuer, the secret and the four endpoints (from the
# IdP's /.well-known/openid-configuration) are required. mozilla-django-oidc reads the OIDC_* names.
GATEWAY_OIDC_ENABLED = bool(env_str("GATEWAY_OIDC_CLIENT_ID"))
_OIDC_REQUIRED = {
    "GATEWAY_OIDC_ISSUER": "GATEWAY_OIDC_ISSUER",
    "OIDC_RP_CLIENT_ID": "GATEWAY_OIDC_CLIENT_ID",
    "OIDC_RP_CLIENT_SECRET": "GATEWAY_OIDC_CLIENT_SECRET",
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "GATEWAY_OIDC_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT": "GATEWAY_OIDC_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT": "GATEWAY_OIDC_USERINFO_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT": "GATEWAY_OIDC_JWKS_ENDPOINT",
}
if GATEWAY_OIDC_ENABLED:
    _missing = [variable for variable in _OIDC_REQUIRED.values() if not env_str(variable)]
    if _missing:
        raise ImproperlyConfigured(
            f"GATEWAY_OIDC_CLIENT_ID is set, so sign-in with the identity provider is on, and it needs "
            f"{', '.join(_missing)} too (docs/reference/environment.md)"
        )
    globals().update({name: env_str(variable) for name, variable in _OIDC_REQUIRED.items()})
GATEWAY_OIDC_LABEL = env_str("GATEWAY_OIDC_LABEL", "your organisation's sign-in")


def _oidc_group_ids() -> dict[str, str]:
    """GATEWAY_OIDC_GROUPS: a JSON object from the ids the IdP's groups claim carries to the directory's
    group names; empty: the groups claim is not read. Ids, never names: anyone at the IdP may make a
    group called `payments`, nobody but the IdP chooses its id."""
    text = env_str("GATEWAY_OIDC_GROUPS")
    if not text:
        return {}
    shape = 'a JSON object, {"<group id>": "<group name>", ...}'
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"GATEWAY_OIDC_GROUPS must be {shape}: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"GATEWAY_OIDC_GROUPS must be {shape}")
    for group_id, name in value.items():
        if not group_id.strip() or not isinstance(name, str) or not slug_re.match(name) or len(name) > 64:
            raise ImproperlyConfigured(
                f"GATEWAY_OIDC_GROUPS: {group_id!r}: {name!r} must map a group id to a group's name "
                f"(letters, digits, - and _, at most 64)"
            )
    return value


# The IdP's group ids mapped to the directory's groups, and the claim that carries them (`groups` unless
# said); neither set: groups are left to the admin.
GATEWAY_OIDC_GROUPS = _oidc_group_ids()
GATEWAY_OIDC_GROUPS_CLAIM = env_str("GATEWAY_OIDC_GROUPS_CLAIM", "groups" if GATEWAY_OIDC_GROUPS else "") or ""
if GATEWAY_OIDC_GROUPS_CLAIM and not GATEWAY_OIDC_GROUPS:
    raise ImproperlyConfigured(
        "GATEWAY_OIDC_GROUPS_CLAIM is set but GATEWAY_OIDC_GROUPS lists no group ids: the claim's values are "
        "not taken as group names (anyone at the identity provider may make a group with any name); list "
        "the ids that count and the group each maps to, or unset GATEWAY_OIDC_GROUPS_CLAIM "
        "(docs/reference/environment.md)"
    )
OIDC_RP_SCOPES = env_str("GATEWAY_OIDC_SCOPES", "openid email profile")
OIDC_RP_SIGN_ALGO = env_str("GATEWAY_OIDC_SIGN_ALGO", "RS256")
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = False
OIDC_TIMEOUT = env_int("GATEWAY_OIDC_TIMEOUT_SECONDS", 10)
LOGIN_REDIRECT_URL = "approval-inbox"
LOGIN_REDIRECT_URL_FAILURE = "/login/?failed=idp"  # a path: mozilla-django-oidc redirects to it as it is
AUTHENTICATION_BACKENDS = [
    *(["channels_ext.web.sign_in.IdentityProviderBackend"] if GATEWAY_OIDC_ENABLED else []),
    # local passwords stay (`make run`, break-glass admins); Django's own backend after it serves the
    # sessions it signed in before (gateway/auth_backends.py)
    "gateway.auth_backends.PasswordBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# --- DRF -------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["approvals.api.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["approvals.api.parsing.JsonParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "approvals.api.negotiation.FirstRendererIfNoneAccepted",
    "EXCEPTION_HANDLER": "approvals.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Approval gateway agent API",
    "DESCRIPTION": "Human-in-the-loop approval gateway for AI agents.",
    "VERSION": __version__,  # the gateway's; the API's own is v1, the prefix of its paths
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: JSON Schema proper (`propertyNames`, `null` as a type), to state what the server refuses.
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "approvals.api.schema.api_wide_answers"],
}

# --- Misc ------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
LOGIN_URL = "approval-login"
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_BODY_BYTES  # Django's own check agrees with the ASGI layer's

# `text` (the default, what `make run` prints) or `json`: one JSON object per line, with the request,
# agent, session, tool and confirmation a line is about (gateway_utils.logs; docs/operating.md, "Logs").
GATEWAY_LOG_FORMAT = env_str("GATEWAY_LOG_FORMAT", "text")
if GATEWAY_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"GATEWAY_LOG_FORMAT must be text or json, got {GATEWAY_LOG_FORMAT!r}")

# Applied by `gateway_utils.logs.configure`: uvicorn's own loggers and Python's warnings go through it too.
LOGGING_CONFIG = "gateway_utils.logs.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "gateway_utils.logs.json_formatter"},
    },
    "filters": {"context": {"()": "gateway_utils.logs.ContextFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": GATEWAY_LOG_FORMAT, "filters": ["context"]}
    },
    # Every line goes out through the root's one handler: the gateway's own at GATEWAY_LOG_LEVEL, other
    # libraries' from WARNING, all in the same format. A root with a handler also keeps a library's
    # `logging.basicConfig` from adding its own (the `mcp` SDK's MCPServer adds a rich console handler:
    # every line twice, the second one drawn by rich — about a millisecond each, on the request's thread).
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "gateway": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
        "gateway_utils": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
        "gateway_contract": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
        "approvals": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
        "hooks": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
        "channels_ext": {"level": env_str("GATEWAY_LOG_LEVEL", "INFO")},
    },
}
