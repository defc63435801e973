"""Liveness and readiness."""

import pytest


def test_healthz_answers_without_the_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_checks_the_database_and_the_broker(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["checks"] == {"database": "ok", "broker": "ok", "cache": "ok"}


@pytest.mark.django_db
def test_readyz_reports_an_unreachable_broker_as_degraded_not_unready(client, settings):
    # Events are still applied without the broker: the reconciler enqueues their work later.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["checks"]["broker"].startswith("degraded")


@pytest.mark.django_db
def test_readyz_reports_an_unreachable_cache_as_degraded(client, settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "broker": "ok", "cache": "degraded: ConnectionError"},
    }
