"""With the database unreachable the webhook answers 503 with Retry-After, never 500."""

from contextlib import contextmanager

import pytest
from django.db import connection

from fleet.models import Event
from runs.models import Run
from tests.conftest import task


@contextmanager
def database_down():
    """Point the live connection at a database that cannot be reached, then restore it."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent/bulkhead/db.sqlite3"
    else:
        connection.settings_dict["PORT"] = "1"
        connection.settings_dict["HOST"] = "127.0.0.1"
    yield
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


@pytest.mark.django_db(transaction=True)
def test_the_webhook_answers_503_with_retry_after_when_the_database_is_down(planner, coder):
    body = planner.body("run.started", {"run": "r1", "tasks": [task("a")]})
    headers = planner.headers(body)
    with database_down():
        response = planner.post_raw(body, headers)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["errors"][0]["loc"] == "database"
    # Nothing was written, and the same event goes through once the database is back.
    assert not Run.objects.exists() and not Event.objects.exists()
    assert planner.post_raw(body, headers).status_code == 202
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_api_answers_503_rather_than_500(client, planner, coder):
    from fleet.models import ApiToken

    _, token = ApiToken.issue(planner.agent)
    with database_down():
        response = client.get("/api/v1/runs/r1", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 503
    assert response["Retry-After"]
