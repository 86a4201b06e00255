"""Settings for every environment, read from environment variables.

With nothing set, the service runs in its embedded default: PostgreSQL and Redis on Unix sockets
under the data folder (see ``config.embedded``). ``DATABASE_URL`` and ``REDIS_URL`` switch to
external services. The README's configuration table lists every variable read here.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from config.embedded import OWNER_ROLE, EmbeddedLayout
from config.env import (
    ConfigError,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_path,
    env_str,
    search_weights,
)
from config.logs import logging_config
from config.version import VERSION

# Lets typed generics such as ModelAdmin[Agent] work at run time (DRF's: see LedgerConfig).
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = env_path("AGENT_MEMORY_DATA_DIR", Path("var"), base=BASE_DIR)
EMBEDDED = EmbeddedLayout(DATA_DIR)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in the data folder."""
    configured = env_str("SECRET_KEY")
    if configured:
        return configured
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def _owner_database(url: str, service: dict[str, Any]) -> dict[str, Any]:
    """DATABASE_MIGRATE_URL: the owner's way into the same database as DATABASE_URL."""
    owner = dict(dj_database_url.parse(url))
    if owner.get("NAME") != service.get("NAME"):
        raise ConfigError(
            f"DATABASE_MIGRATE_URL names database {owner.get('NAME')!r} but DATABASE_URL "
            f"names {service.get('NAME')!r}; both must reach the same database."
        )
    return owner


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", default=False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "ledger",
    "memory",
    "trust",
]

MIDDLEWARE = [
    "config.metrics.RequestMetricsMiddleware",
    "config.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.security.ContentSecurityPolicyMiddleware",
    "config.outage.DependencyOutageMiddleware",
    "config.routers.ReadYourWritesMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.middleware.ApiBodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "ledger.middleware.TenantMembershipMiddleware",
    "ledger.receipts.LedgerReceiptMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
# The service connects as a role that owns nothing and cannot switch the ledger's triggers off;
# migrations run as the owner of the tables (config/database.py, docs/operations.md).
DATABASE_URL = env_str("DATABASE_URL")
DATABASE_MIGRATE_URL = env_str("DATABASE_MIGRATE_URL")
DATABASES: dict[str, dict[str, Any]]
DATABASE_OWNER: dict[str, Any] | None
if DATABASE_URL:
    DATABASES = {"default": dict(dj_database_url.parse(DATABASE_URL, conn_max_age=60))}
    DATABASE_OWNER = (
        _owner_database(DATABASE_MIGRATE_URL, DATABASES["default"])
        if DATABASE_MIGRATE_URL
        else None
    )
else:
    DATABASES = {"default": {**EMBEDDED.database_settings(), "CONN_MAX_AGE": 60}}
    DATABASE_OWNER = EMBEDDED.database_settings(OWNER_ROLE)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Read replicas (config/routers.py): lag-tolerant reads (search, recall, dashboards' lists) go to
# them, as the service's role; a caller that wrote reads from the primary for
# REPLICA_STICKY_SECONDS. The test run mirrors them on the primary.
for _number, _url in enumerate(env_list("DATABASE_REPLICA_URLS", []), start=1):
    DATABASES[f"replica_{_number}"] = {
        **dj_database_url.parse(_url, conn_max_age=60),
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"MIRROR": "default"},
    }
DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]
REPLICA_STICKY_SECONDS = env_int("REPLICA_STICKY_SECONDS", 5)
DATABASE_APP_ROLE = str(DATABASES["default"].get("USER") or "")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis and Celery -------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL") or EMBEDDED.redis_url


def _celery_url(redis_url: str) -> str:
    """Celery names Unix-socket Redis ``redis+socket://``; redis-py names it ``unix://``."""
    if redis_url.startswith("unix://"):
        path, _, query = redis_url.removeprefix("unix://").partition("?")
        database = dict(part.split("=", 1) for part in query.split("&") if "=" in part).get("db")
        return f"redis+socket://{path}" + (f"?virtual_host={database}" if database else "")
    return redis_url


CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "agent-memory",
    }
}

CELERY_BROKER_URL = _celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = _celery_url(REDIS_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Beat reads its schedule from the database (django-celery-beat), so admins change job intervals
# in the Django admin without a deploy; CELERY_BEAT_SCHEDULE below is synced into it at start.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Background jobs (SPEC 9, ledger/jobs.py): rows per batch (one short transaction each), and how
# long one task loops over batches before it queues its own continuation.
JOB_BATCH_SIZE = env_int("JOB_BATCH_SIZE", 5000)
JOB_TIME_BUDGET_SECONDS = env_int("JOB_TIME_BUDGET_SECONDS", 240)
# Celery's limits sit past the budget: the soft one raises inside a batch that hangs, the hard
# one kills the process; either way the batch rolls back and the next run goes on.
JOB_SOFT_TIME_LIMIT_SECONDS = JOB_TIME_BUDGET_SECONDS + 60
JOB_HARD_TIME_LIMIT_SECONDS = JOB_TIME_BUDGET_SECONDS + 120
WORKER_HEARTBEAT_INTERVAL_SECONDS = env_int("WORKER_HEARTBEAT_INTERVAL_SECONDS", 15)
# The niceness (0-19) of the worker's pool processes, which run every task: embedding ledger
# events, the jobs. Background work that shares a machine with web processes should yield the
# CPU to a request waiting for it. 0 leaves them at the worker's own priority.
WORKER_NICENESS = env_int("WORKER_NICENESS", 10)
if not 0 <= WORKER_NICENESS <= 19:
    raise ImproperlyConfigured("WORKER_NICENESS must be from 0 to 19.")
# Background work (the worker's pool processes, each process's bulk-embedding thread) also runs
# under Linux's SCHED_IDLE policy: a request thread that wakes takes the core from it at once,
# where a niced thread may first finish its time slice (config.cpu_priority).
BACKGROUND_IDLE_POLICY = env_bool("BACKGROUND_IDLE_POLICY", default=True)
# /healthz calls the worker unhealthy when its last heartbeat task ran longer ago than this.
WORKER_HEARTBEAT_MAX_AGE_SECONDS = env_int("WORKER_HEARTBEAT_MAX_AGE_SECONDS", 60)
# Only the heartbeat lives here (beat copies it into the database at start, overwriting edits);
# the background jobs' schedules are seeded into the database by ledger/jobs.py, editable there.
CELERY_BEAT_SCHEDULE = {
    "worker-heartbeat": {
        "task": "config.tasks.worker_heartbeat",
        "schedule": float(WORKER_HEARTBEAT_INTERVAL_SECONDS),
        # django-celery-beat's name for the option that makes a queued heartbeat expire.
        "options": {"expire_seconds": WORKER_HEARTBEAT_INTERVAL_SECONDS},
    },
}

# --- Auth, sessions, security -----------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_COOKIES = env_bool("SECURE_COOKIES", default=False)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# HSTS is opt-in: once a browser has seen it, the site is HTTPS-only for that long.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=False)
# Probes and scrapes stay on plain HTTP for containers, load balancers and Prometheus.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^livez$", r"^readyz$", r"^metrics$"]
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients).
if env_bool("TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Swagger UI's page gets a Content-Security-Policy of its own (config.security).
API_DOCS_PATH = "/api/docs/"

# Rate limits (config.ratelimit), counted in Redis; 0 switches a limit off.
API_RATE_LIMIT = env_int("API_RATE_LIMIT", 1200)
API_RATE_LIMIT_WINDOW_SECONDS = env_int("API_RATE_LIMIT_WINDOW_SECONDS", 60)
# Failed sign-ins per username per window (0 switches sign-in limits off), and per client
# address, past which that address may not retry the usernames that failed from it.
LOGIN_RATE_LIMIT = env_int("LOGIN_RATE_LIMIT", 10)
LOGIN_ADDRESS_RATE_LIMIT = env_int("LOGIN_ADDRESS_RATE_LIMIT", 100)
LOGIN_RATE_LIMIT_WINDOW_SECONDS = env_int("LOGIN_RATE_LIMIT_WINDOW_SECONDS", 300)
# How many reverse proxies of ours append the client's address to X-Forwarded-For in front of the
# app; the sign-in limits then read the client from there (config.ratelimit.client_address).
# 0: the header is ignored and REMOTE_ADDR is the client.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
if TRUSTED_PROXY_COUNT < 0:
    raise ConfigError(f"TRUSTED_PROXY_COUNT must be 0 or more, got {TRUSTED_PROXY_COUNT}")

# --- API --------------------------------------------------------------------------------------
# Bodies above this are refused with 413 before they are read.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
API_KEY_LAST_USED_RESOLUTION_SECONDS = 60
# Verified API keys are kept per process for this long at most (ledger.key_cache); every change
# to a key or a tenant makes every process read them again at once. 0: a query per request.
API_KEY_CACHE_SECONDS = env_int("API_KEY_CACHE_SECONDS", 30)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["ledger.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["ledger.permissions.HasRequiredRole"],
    "DEFAULT_THROTTLE_CLASSES": ["config.ratelimit.ApiKeyRateThrottle"],
    # No OPTIONS metadata: the OpenAPI schema describes the API, and DRF's introspection failed
    # (500) on views without one serializer. OPTIONS answers 405 method_not_allowed.
    "DEFAULT_METADATA_CLASS": None,
    # JSON only, refusing what PostgreSQL or Python's recursion cannot take (config.api).
    "DEFAULT_PARSER_CLASSES": ["config.api.JsonParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "config.api.CursorPagination",
    "DEFAULT_SCHEMA_CLASS": "config.schema.AutoSchema",
    "EXCEPTION_HANDLER": "config.api.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "PAGE_SIZE": 50,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Memory API",
    "DESCRIPTION": (
        "Memory and trust for multi-agent LLM systems: an append-only ledger, episodic memory, "
        "and trust scores learned from dissents and human overrides. Authenticate with "
        "`Authorization: Bearer <api key>`."
    ),
    # The service's release (pyproject.toml); the API's own version is the /api/v1/ prefix.
    "VERSION": VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's assets come from the drf-spectacular-sidecar package: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Two choice sets share the field name "role"; named here so the schema's enum names are
    # stable (and `check --deploy --fail-level WARNING` has nothing to warn about).
    # The default enum hook, then every operation's error answers (config.schema).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.document_error_responses",
        "memory.search.filter_schema.add_filter_components",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ApiKeyRoleEnum": "ledger.models.Role",
        "MemoryRoleEnum": "memory.models.MemoryRole",
    },
}

# --- Embeddings (used by the memory app) ------------------------------------------------------
EMBEDDING_BACKEND = env_str("EMBEDDING_BACKEND", "local")  # "local" or "openai"
# The model: for "local" all-MiniLM-L6-v2-int8-dynamic (empty: the default) or
# all-MiniLM-L6-v2-int8 (the shipped file as it is); for "openai" the endpoint's model name.
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", "")
# Where the local backend keeps the model file it re-quantizes from the shipped one on first use.
EMBEDDING_MODEL_DIR = env_path("EMBEDDING_MODEL_DIR", DATA_DIR / "models", base=BASE_DIR)
EMBEDDING_URL = env_str("EMBEDDING_URL", "")
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", "")
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384)
EMBEDDING_TIMEOUT_SECONDS = env_float("EMBEDDING_TIMEOUT_SECONDS", 10.0)
# onnxruntime threads of the local model per process. One: a web process serves several requests
# at once, and a second thread per call cost 45 % more CPU for 10 % less wall time
# (bench/embedding_threads.py), CPU that the other requests and the database needed.
EMBEDDING_THREADS = env_int("EMBEDDING_THREADS", 1)
# Texts whose vectors each process keeps (about 3 kB each, float64): consolidation compares a new
# memory with its neighbours by content, and the same neighbours come back store after store.
EMBEDDING_CACHE_TEXTS = env_int("EMBEDDING_CACHE_TEXTS", 4096)
# Niceness of the thread that embeds calls of more than a few texts (a batch store, a batch's
# consolidation, the backfill) in each process; a search's query, or one store's text, content
# and neighbours, is embedded on its own request thread at the process's priority, so an ingest
# in the same process gives way to searches (memory.embeddings.backends.CALLER_THREAD_MAX_TEXTS).
# 0: every call on its caller's thread.
EMBEDDING_BULK_NICENESS = env_int("EMBEDDING_BULK_NICENESS", 10)
if not 0 <= EMBEDDING_BULK_NICENESS <= 19:
    raise ImproperlyConfigured("EMBEDDING_BULK_NICENESS must be from 0 to 19.")
# Token counting for working-memory budgets: o200k_base or cl100k_base, shipped in quicktok-v1.
TOKENIZER_ENCODING = env_str("TOKENIZER_ENCODING", "o200k_base")

# --- Internationalisation, static files -------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Third-party browser assets come from npm (package-lock.json, `npm ci` in `make setup`) and are
# served from node_modules under their own prefix, never copied into the repository.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/chart.js", BASE_DIR / "node_modules" / "chart.js" / "dist"),
    # The trust chart's time axis: Chart.js needs a date adapter; Luxon's can draw it in UTC,
    # the time every page shows.
    ("vendor/luxon", BASE_DIR / "node_modules" / "luxon" / "build" / "global"),
    ("vendor/chartjs-adapter-luxon", BASE_DIR / "node_modules" / "chartjs-adapter-luxon" / "dist"),
]
# The image collects them at build into a folder of its own (Dockerfile), so an upgrade serves
# its own files and never those a data volume kept from the last release.
STATIC_ROOT = env_path("STATIC_ROOT", DATA_DIR / "static", base=BASE_DIR)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# LOG_FORMAT=json: one JSON object per line with the request id (config.logs); text by default.
LOG_FORMAT = env_str("LOG_FORMAT", "text").lower()
if LOG_FORMAT not in {"text", "json"}:
    raise ConfigError(f"LOG_FORMAT must be text or json, got {LOG_FORMAT!r}")
LOGGING = logging_config(log_format=LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))
# Take the request id from X-Request-ID: only when a proxy of ours sets it (and drops clients').
TRUST_X_REQUEST_ID = env_bool("TRUST_X_REQUEST_ID", default=False)
# OpenTelemetry traces over OTLP (config.tracing; the "otel" extra); OTEL_* configure the export.
OTEL_TRACING = env_bool("OTEL_TRACING", default=False)

# --- Observability (docs/operations.md#observing-it) --------------------------------------------
# Prometheus series of every process that shares this folder are summed at /metrics
# (config.metrics); web and worker processes must share it to be seen together.
METRICS_DIR = env_path("PROMETHEUS_MULTIPROC_DIR", DATA_DIR / "metrics", base=BASE_DIR)
# /metrics answers clients from these addresses, or anyone sending "Bearer <METRICS_TOKEN>".
METRICS_ALLOWED_NETWORKS = env_networks("METRICS_ALLOWED_ADDRESSES", ["127.0.0.1/8", "::1"])
METRICS_TOKEN = env_str("METRICS_TOKEN")

# --- Ledger -----------------------------------------------------------------------------------
LEDGER_MAX_PAYLOAD_BYTES = env_int("LEDGER_MAX_PAYLOAD_BYTES", 1024 * 1024)
LEDGER_MAX_BATCH = env_int("LEDGER_MAX_BATCH", 1000)
IDEMPOTENCY_RETENTION_HOURS = env_int("IDEMPOTENCY_RETENTION_HOURS", 24)
# Signed checkpoints of every chain's head, kept where the database's roles cannot write
# (ledger/anchors.py). The key: LEDGER_ANCHOR_KEY (base64 of a 32-byte Ed25519 private key), else
# the file LEDGER_ANCHOR_KEY_FILE, generated on first use.
LEDGER_ANCHOR_DIR = env_path("LEDGER_ANCHOR_DIR", DATA_DIR / "ledger-anchors", base=BASE_DIR)
LEDGER_ANCHOR_KEY = env_str("LEDGER_ANCHOR_KEY")
LEDGER_ANCHOR_KEY_FILE = env_path(
    "LEDGER_ANCHOR_KEY_FILE", DATA_DIR / "ledger_anchor_key", base=BASE_DIR
)

# --- Memory -------------------------------------------------------------------------------------
MEMORY_MAX_CONTENT_CHARS = env_int("MEMORY_MAX_CONTENT_CHARS", 100_000)
# Active memories one agent may keep; above it the least important are archived first.
MEMORY_QUOTA_PER_AGENT = env_int("MEMORY_QUOTA_PER_AGENT", 10_000)
# The longest body of one knowledge-base document, in characters.
KB_MAX_BODY_CHARS = env_int("KB_MAX_BODY_CHARS", 200_000)

# Search (SPEC 5): weights of similarity, recency, importance and source priority; candidates
# with a cosine under the threshold and no keyword in common are dropped.
SEARCH_WEIGHTS = search_weights(env_list("SEARCH_WEIGHTS", ["0.5", "0.2", "0.2", "0.1"]))
SEARCH_SIMILARITY_THRESHOLD = env_float("SEARCH_SIMILARITY_THRESHOLD", 0.2)
SEARCH_RECENCY_HALF_LIFE_DAYS = env_float("SEARCH_RECENCY_HALF_LIFE_DAYS", 30.0)
SEARCH_MAX_TOP_K = env_int("SEARCH_MAX_TOP_K", 50)
# How the evidence is fused (memory.search.ranking.RankingKnobs): chosen by
# leave-one-conversation-out on LoCoMo dev (bench/locomo_research.py --loco).
SEARCH_DENSE_WEIGHT = env_float("SEARCH_DENSE_WEIGHT", 0.4)
SEARCH_NEIGHBOUR_BOOST = env_float("SEARCH_NEIGHBOUR_BOOST", 0.3)
SEARCH_ANSWER_BOOST = env_float("SEARCH_ANSWER_BOOST", 0.2)
SEARCH_TIME_BOOST = env_float("SEARCH_TIME_BOOST", 0.2)
SEARCH_PERIOD_BOOST = env_float("SEARCH_PERIOD_BOOST", 0.2)
SEARCH_RELEVANCE_GATE = env_bool("SEARCH_RELEVANCE_GATE", True)
SEARCH_QUESTION_PENALTY = env_float("SEARCH_QUESTION_PENALTY", 0.12)
SEARCH_OWN_LINE_WEIGHT = env_float("SEARCH_OWN_LINE_WEIGHT", 3.0)
SEARCH_FEEDBACK_WEIGHT = env_float("SEARCH_FEEDBACK_WEIGHT", 0.0)
SEARCH_FEEDBACK_DOCS = env_int("SEARCH_FEEDBACK_DOCS", 3)

# --- Consolidation: memories that supersede older ones (docs/search.md#facts-that-change) ---
# off: nothing is looked for; propose: each store answers the older memories it would supersede
# (supersession_candidates) and changes nothing; apply: it supersedes them, each a
# memory.superseded event. Explicit `supersedes` ids are applied in every mode.
CONSOLIDATION_MODE = env_str("CONSOLIDATION_MODE", "propose")
if CONSOLIDATION_MODE not in ("off", "propose", "apply"):
    raise ImproperlyConfigured("CONSOLIDATION_MODE must be off, propose or apply.")
# The rule: the cosine at or above which a neighbour that shares the subject is superseded
# (chosen by 5-fold cross-validation, bench/supersession.py), and the subject words it must share.
CONSOLIDATION_SIMILARITY_THRESHOLD = env_float("CONSOLIDATION_SIMILARITY_THRESHOLD", 0.6)
CONSOLIDATION_MIN_SHARED_WORDS = env_int("CONSOLIDATION_MIN_SHARED_WORDS", 1)
# How many nearest older memories are weighed for each new one.
CONSOLIDATION_NEIGHBOURS = env_int("CONSOLIDATION_NEIGHBOURS", 5)
# A batch of more than one memory is judged after its store by a Celery task (the batch's
# `defer_consolidation` overrides it): the neighbour reads and the content embeddings took half
# of a batch store's time (docs/benchmarks.md, "Memory store throughput").
CONSOLIDATION_DEFER_BATCHES = env_bool("CONSOLIDATION_DEFER_BATCHES", True)
# Optional: an OpenAI-compatible chat model decides instead of the rule (single stores only);
# a failure falls back to the rule. Neighbours under the floor are not shown to it.
CONSOLIDATION_LLM_URL = env_str("CONSOLIDATION_LLM_URL", "")
CONSOLIDATION_LLM_MODEL = env_str("CONSOLIDATION_LLM_MODEL", "gpt-4o-mini")
CONSOLIDATION_LLM_API_KEY = env_str("CONSOLIDATION_LLM_API_KEY", "")
CONSOLIDATION_LLM_TIMEOUT_SECONDS = env_float("CONSOLIDATION_LLM_TIMEOUT_SECONDS", 10.0)
CONSOLIDATION_LLM_MIN_SIMILARITY = env_float("CONSOLIDATION_LLM_MIN_SIMILARITY", 0.4)

# --- Reflection (optional LLM summariser; the default is local and deterministic) -----------
REFLECTION_LLM_URL = env_str("REFLECTION_LLM_URL", "")
REFLECTION_LLM_MODEL = env_str("REFLECTION_LLM_MODEL", "gpt-4o-mini")
REFLECTION_LLM_API_KEY = env_str("REFLECTION_LLM_API_KEY", "")
REFLECTION_LLM_TIMEOUT_SECONDS = env_float("REFLECTION_LLM_TIMEOUT_SECONDS", 20.0)

# --- Trust (SPEC 8) ---------------------------------------------------------------------------
# m in score = (m·0.6 + n·raw) / (m + n): how many events of evidence weigh as much as the prior.
TRUST_PRIOR_STRENGTH = env_float("TRUST_PRIOR_STRENGTH", 5.0)
# The ratios count events of this many days, or all history while the window holds fewer than 5.
TRUST_WINDOW_DAYS = env_int("TRUST_WINDOW_DAYS", 90)
# An override the final output contradicts is inferred regretted this long after it was logged.
OVERRIDE_CHECK_HOURS = env_float("OVERRIDE_CHECK_HOURS", 24.0)
# Probation ends after this many rounds (and once probation_until has passed).
PROBATION_MIN_ROUNDS = env_int("PROBATION_MIN_ROUNDS", 5)
# Devil's Advocate candidates need a trust score above this.
DEVILS_ADVOCATE_MIN_TRUST = env_float("DEVILS_ADVOCATE_MIN_TRUST", 0.2)
# An agent is flagged when its recent citations' entropy (bits) falls under the threshold while
# its trust is at least GAMING_MIN_TRUST.
GAMING_ENTROPY_THRESHOLD_BITS = env_float("GAMING_ENTROPY_THRESHOLD_BITS", 1.0)
GAMING_MIN_TRUST = env_float("GAMING_MIN_TRUST", 0.7)
# A decision maker at or above this trust may open a rubric change from an override.
RUBRIC_PROPOSAL_MIN_TRUST = env_float("RUBRIC_PROPOSAL_MIN_TRUST", 0.75)

# --- Content store (SPEC 7) -------------------------------------------------------------------
# Largest content of one item, in UTF-8 bytes (JSON: its compact serialisation). Kept 64 KiB under
# API_MAX_BODY_BYTES so a body carrying a maximal item plus its metadata still fits the request.
CONTENT_MAX_BYTES = env_int("CONTENT_MAX_BYTES", 10 * 1024 * 1024 - 64 * 1024)
# Dotted paths of extra compaction plugins, tried before the built-in ones.
CONTENT_COMPACTION_PLUGINS = env_list("CONTENT_COMPACTION_PLUGINS", [])
# Optional LLM compactor (OpenAI-compatible chat endpoint); the plugins are the fallback.
CONTENT_COMPACTOR_LLM_URL = env_str("CONTENT_COMPACTOR_LLM_URL", "")
CONTENT_COMPACTOR_LLM_MODEL = env_str("CONTENT_COMPACTOR_LLM_MODEL", "gpt-4o-mini")
CONTENT_COMPACTOR_LLM_API_KEY = env_str("CONTENT_COMPACTOR_LLM_API_KEY", "")
CONTENT_COMPACTOR_LLM_TIMEOUT_SECONDS = env_float("CONTENT_COMPACTOR_LLM_TIMEOUT_SECONDS", 20.0)
