"""Configuration from the environment: the embedded default and a clean production check."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "BULKHEAD_EMBEDDED": "0",
    "SECRET_KEY": "a-production-like-secret-key-with-enough-entropy-0123456789-abcdefghijk",
    "SECURE_SSL_REDIRECT": "1",
    "SESSION_COOKIE_SECURE": "1",
    "CSRF_COOKIE_SECURE": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "ALLOWED_HOSTS": "bulkhead.example.com",
}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for Playwright; a deployment never has it.
    dropped = {"DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION and k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_a_production_configuration():
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def security_settings(env: dict[str, str]) -> list[str]:
    show = (
        "from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)"
    )
    done = manage("shell", "--no-imports", "-c", show, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


def test_production_is_secure_by_default_without_saying_so():
    """With BULKHEAD_EMBEDDED=0 alone, cookies are Secure and HSTS is on; each can be turned off."""
    bare = {
        "BULKHEAD_EMBEDDED": "0",
        "SECRET_KEY": PRODUCTION["SECRET_KEY"],
        "ALLOWED_HOSTS": "bulkhead.example.com",
    }
    assert security_settings(bare) == ["True", "True", "31536000"]
    off = {**bare, "SESSION_COOKIE_SECURE": "0", "SECURE_HSTS_SECONDS": "0"}
    assert security_settings(off) == ["False", "True", "0"]
    assert security_settings({"BULKHEAD_EMBEDDED": "1"}) == ["False", "False", "0"]


def test_production_refuses_to_start_without_a_secret_key():
    env = {**PRODUCTION, "SECRET_KEY": ""}
    done = manage("check", env=env)
    assert done.returncode != 0
    assert "SECRET_KEY must be set" in done.stderr


def test_the_embedded_default_is_sqlite_in_wal_mode_and_a_serverless_broker(tmp_path):
    env = {"BULKHEAD_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "CELERY_BROKER_URL": ""}
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    code = (
        "import django; django.setup();"
        "from django.conf import settings; from django.db import connection;"
        "c = connection.cursor(); c.execute('PRAGMA journal_mode');"
        "print(connection.vendor, c.fetchone()[0], settings.CELERY_BROKER_URL);"
        # An empty queue is listed every 0.1 s: a notification is two hops, not two seconds.
        "from fleet.celery import app; print(app.connection_for_read().transport.polling_interval)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **clean,
            **{k: v for k, v in env.items() if v},
            "DJANGO_SETTINGS_MODULE": "fleet.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["sqlite", "wal", "filesystem://localhost/", "0.1"], done.stderr
    assert (tmp_path / "bulkhead.sqlite3").exists()


def test_the_embedded_cache_is_shared_by_processes_so_sign_in_throttling_holds(tmp_path):
    # gunicorn's workers are processes: a count kept in one must be seen by the next.
    env = {"BULKHEAD_VAR_DIR": str(tmp_path), "CACHE_URL": ""}
    code = "from django.core.cache import cache; cache.{}; print(cache.get('failures'))"
    first = manage("shell", "-c", code.format("set('failures', 5, 60)"), env=env)
    second = manage("shell", "-c", code.format("get('failures')"), env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert second.stdout.strip().splitlines()[-1] == "5"


def test_agent_create_prints_the_endpoint_of_the_app_as_make_run_serves_it(tmp_path):
    # `make run PORT=9123` writes the URL it serves on; agent_create in another shell reads it.
    (tmp_path / "site-url").write_text("http://127.0.0.1:9123\n")
    env = {"BULKHEAD_VAR_DIR": str(tmp_path), "SITE_URL": ""}
    code = (
        "import django; django.setup(); from django.conf import settings; print(settings.SITE_URL)"
    )
    clean = {k: v for k, v in os.environ.items() if k != "SITE_URL"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "http://127.0.0.1:9123", done.stderr


@pytest.mark.postgres
@pytest.mark.parametrize(("query", "expected"), [("", "off"), ("?options=-c%20jit%3Don", "on")])
def test_postgresql_connections_run_without_jit_unless_the_url_says(query, expected):
    url = os.environ["DATABASE_URL"].split("?")[0] + query
    code = (
        "import django; django.setup(); from django.db import connection;"
        "c = connection.cursor(); c.execute('SHOW jit'); print(c.fetchone()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "fleet.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == [expected], done.stderr


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_statement_may_name_more_values_than_postgresql_takes_as_parameters():
    """The values are written into the statement's text (psycopg's client-side binding, as
    Django's default): bound apart from it, as prepared statements need, a statement takes at
    most 65,535, and a recompute of a run of 100,000 tasks looks its changed tasks up by key."""
    from runs.models import Task

    keys = [f"t{n}" for n in range(70_000)]
    assert Task.objects.filter(key__in=keys).count() == 0
