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
    assert response.json()["checks"] == {"database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_unreachable(client, settings):
    from fleet.celery import app

    previous = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/readyz")
    finally:
        app.conf.broker_url = previous
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("unavailable")
    assert response["Retry-After"]
