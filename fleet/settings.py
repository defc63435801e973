"""Django settings for Bulkhead, read from the environment (see the README's table)."""

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("BULKHEAD_VAR_DIR", BASE_DIR / "var"))


def envbool(name: str, default: str = "False") -> bool:
    return os.environ.get(name, default).strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: str) -> int:
    return int(os.environ.get(name, default))


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = envbool("DEBUG", "False")
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and not envbool("BULKHEAD_EMBEDDED", "True"):
        raise RuntimeError("SECRET_KEY must be set when BULKHEAD_EMBEDDED is off")
    # The embedded default only: a stable, local key so sessions survive restarts.
    SECRET_KEY = "embedded-insecure-" + "bulkhead-local-development-key-change-me-0123456789"
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")


def running_site_url() -> str | None:
    """The URL `make run` serves on (it writes var/site-url while it runs, PORT=... included)."""
    try:
        return (VAR_DIR / "site-url").read_text().strip() or None
    except OSError:
        return None


# Printed in endpoints (agent_create): the app as it runs, so that the two agree.
SITE_URL = os.environ.get("SITE_URL") or running_site_url() or "http://127.0.0.1:8000"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # its API docs page from its own static files, not a CDN (the CSP allows no other)
    "fleet",
    "runs",
    "escalations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "fleet.middleware.DatabaseUnavailableMiddleware",
    "fleet.middleware.MethodNotAllowedMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "escalations.middleware.OneTimePasswordMiddleware",
    "escalations.middleware.NoStoreMiddleware",
    "escalations.middleware.NulByteMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "fleet.urls"
WSGI_APPLICATION = "fleet.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

EMBEDDED_DATABASE = f"sqlite:///{VAR_DIR / 'bulkhead.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", EMBEDDED_DATABASE),
        conn_max_age=envint("DATABASE_CONN_MAX_AGE", "60"),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file, not memory, so that a real worker process can share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
else:
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 3)
    # Bulkhead's statements are short and many; PostgreSQL's JIT compiler pays off only for long
    # analytic queries, and a recursive statement whose size the planner overestimates (a task's
    # region, read by every answer) spent 0.8 s compiling what ran in 1 ms. Off, unless the
    # URL's own `options` say otherwise. The same `options` plan a prepared statement once per
    # connection: Django's own statements are never prepared (their values are written into
    # their text), and the few `fleet.prepared` sends (an event's task read and writes, a
    # packet's escalation, an answer's locks and region) are index probes whatever the tables'
    # sizes, written so that their plan cannot depend on the values.
    DATABASES["default"]["OPTIONS"].setdefault(
        "options", "-c jit=off -c plan_cache_mode=force_generic_plan"
    )
    # `fleet.prepared`'s statements are prepared the first time a connection sends them.
    DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 0)
    DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME", "test_bulkhead")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHE_URL = os.environ.get("CACHE_URL", "")
if CACHE_URL.startswith("redis"):
    CACHES = {"default": {"BACKEND": "fleet.cache.RedisCache", "LOCATION": CACHE_URL}}
else:
    # Files, not process memory: sign-in throttling and rate limits must hold across the
    # embedded default's web processes (each gunicorn worker has its own memory).
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
NODE_MODULES = BASE_DIR / "node_modules"
# Front-end libraries come from npm (package-lock.json) and are served from node_modules.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/chart.js", NODE_MODULES / "chart.js" / "dist"),
    ("vendor/cytoscape", NODE_MODULES / "cytoscape" / "dist"),
    ("vendor/cytoscape-dagre", NODE_MODULES / "cytoscape-dagre"),
    ("vendor/dagre", NODE_MODULES / "dagre" / "dist"),
]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Security: strict by default, relaxed only where plain HTTP is the embedded default. In
# production (BULKHEAD_EMBEDDED=0) cookies are Secure and HSTS is on unless turned off here.
PRODUCTION = not envbool("BULKHEAD_EMBEDDED", "True")
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", "False")
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", str(PRODUCTION))
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", str(PRODUCTION))
CSRF_FAILURE_VIEW = "fleet.views.csrf_failure"
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", "31536000" if PRODUCTION else "0")
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
BEHIND_PROXY = envbool("BEHIND_PROXY")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_PROXY else None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
    "base-uri": ["'none'"],
    "object-src": ["'none'"],
}

# The agent webhook.
WEBHOOK_MAX_BODY_BYTES = envint("WEBHOOK_MAX_BODY_BYTES", str(1024 * 1024))
WEBHOOK_MAX_PACKET_BYTES = envint("WEBHOOK_MAX_PACKET_BYTES", str(64 * 1024))
WEBHOOK_MAX_BATCH_BYTES = envint("WEBHOOK_MAX_BATCH_BYTES", str(16 * 1024 * 1024))
WEBHOOK_MAX_BATCH_EVENTS = 500
WEBHOOK_TOLERANCE_SECONDS = 300
AGENT_RATE_LIMIT = envint("AGENT_RATE_LIMIT", "6000")  # requests per agent per window
AGENT_RATE_WINDOW_SECONDS = envint("AGENT_RATE_WINDOW_SECONDS", "60")
DATABASE_RETRY_AFTER_SECONDS = envint("DATABASE_RETRY_AFTER_SECONDS", "5")

# Celery. The embedded default uses kombu's filesystem transport: no server to start.
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost/")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem"):
    CELERY_BROKER_TRANSPORT = "fleet.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        # The worker lists the queue folder this often when it is empty (kombu's default, 1 s,
        # is a second per hop: an event's notification takes two, the recompute and the send).
        "polling_interval": float(os.environ.get("BROKER_POLLING_INTERVAL", "0.1")),
    }
else:
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        CELERY_BROKER_TRANSPORT = "fleet.broker:RedisTransport"  # survives Redis going away
    # Longer than any countdown we schedule, so Redis does not redeliver a delayed retry early;
    # the reconciler covers what a lost message stood for.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": envint("BROKER_VISIBILITY_TIMEOUT", "7200")
    }
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", "120")
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", "100")
# Unset, Celery's Django fixup closes the database connection before and after every task: a
# new connection per task. Set, a connection serves up to this many tasks, and fleet/celery.py
# applies CONN_MAX_AGE and the health check around each task as Django does around a request.
CELERY_DB_REUSE_MAX = envint("CELERY_DB_REUSE_MAX", "1000")
CELERY_TASK_IGNORE_RESULT = CELERY_RESULT_BACKEND is None
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", "False")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker rides out a broker outage. It retries the connection for as long as the outage lasts
# (Celery gives up after 100 tries by default, and the worker exits). On the loss it cancels the
# acknowledged-late tasks it is running, as Celery 6 will by default: their messages cannot be
# acknowledged on the lost connection, and a late acknowledgement on a channel kombu has already
# closed is one way into `AttributeError: 'NoneType' object has no attribute 'hostname'` inside
# kombu's Redis transport (kombu issues 582 and 970), which stopped the worker; the other, closing
# the lost connection, is turned into the connection error it is by fleet.broker.RedisTransport.
# Every task is idempotent and what it stood for is in the database: the reconciler enqueues it
# again.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
RECONCILE_EVERY_SECONDS = envint("RECONCILE_EVERY_SECONDS", "30")
# Outbound notifications: each phase of a request (connect, write, read) may take the timeout; a
# send is leased for 3 × that + 30 s (or DELIVERY_LEASE_SECONDS, never less than 3 × the timeout),
# after which a delivery whose worker died mid-request is sent again.
DELIVERY_TIMEOUT_SECONDS = envint("DELIVERY_TIMEOUT_SECONDS", "10")
DELIVERY_LEASE_SECONDS = envint("DELIVERY_LEASE_SECONDS", "0")
# Work younger than this is presumed in flight, not lost.
RECONCILE_GRACE_SECONDS = envint("RECONCILE_GRACE_SECONDS", "30")
# Reminders at half time and the next tier when overdue; each step is recorded once.
ESCALATION_SWEEP_SECONDS = envint("ESCALATION_SWEEP_SECONDS", "60")
CELERY_BEAT_SCHEDULE = {
    "reconcile": {"task": "fleet.tasks.reconcile", "schedule": float(RECONCILE_EVERY_SECONDS)},
    "escalation-sweep": {
        "task": "escalations.tasks.sweep_due",
        "schedule": float(ESCALATION_SWEEP_SECONDS),
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Email about escalations: SMTP when EMAIL_HOST is set (or in production), else files under
# var/mail/ (the embedded default: `make run` prints where).
EMAIL_DIR = VAR_DIR / "mail"
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "bulkhead@localhost")
if os.environ.get("EMAIL_HOST") or PRODUCTION:
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": os.environ.get("EMAIL_HOST", "localhost"),
                "port": envint("EMAIL_PORT", "25"),
                "username": os.environ.get("EMAIL_HOST_USER", ""),
                "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
                "use_tls": envbool("EMAIL_USE_TLS"),
                "use_ssl": envbool("EMAIL_USE_SSL"),
                "timeout": envint("EMAIL_TIMEOUT", "10"),
            },
        }
    }
else:
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "OPTIONS": {"file_path": str(EMAIL_DIR)},
        }
    }
# How long a link in a message about an escalation opens its packet page (after sign-in).
ESCALATION_LINK_MAX_AGE_SECONDS = envint("ESCALATION_LINK_MAX_AGE_SECONDS", str(7 * 24 * 3600))
# An email or chat message is retried (backoff up to 5 minutes) for this long, then failed; a
# number of tries fails it sooner when set (0: no such limit).
ESCALATION_MESSAGE_RETRY_WINDOW_SECONDS = envint(
    "ESCALATION_MESSAGE_RETRY_WINDOW_SECONDS", str(24 * 3600)
)
ESCALATION_MESSAGE_MAX_ATTEMPTS = envint("ESCALATION_MESSAGE_MAX_ATTEMPTS", "0")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The level on the handler too: Django's own loggers (a 4xx's warning from django.request)
    # reach it through the root without passing the root's level.
    "handlers": {
        "console": {"class": "logging.StreamHandler", "level": os.environ.get("LOG_LEVEL", "INFO")}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

VAR_DIR.mkdir(parents=True, exist_ok=True)
STATIC_ROOT.mkdir(exist_ok=True)
if CELERY_BROKER_URL.startswith("filesystem"):
    for folder in ("queue", "processed", "control"):
        (BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
