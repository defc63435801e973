"""The worker's database connection: kept from task to task, closed as Django would close it."""

import time
from datetime import datetime

import pytest
from celery import signals
from django.db import connection, transaction

from fleet.tasks import deliver
from runs.models import FrontierChange
from tests.conftest import eventually, task


def backends() -> set[tuple[int, datetime]]:
    """The other clients' sessions on the test database, each as (pid, when it connected)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return set(cursor.fetchall())


def finished(sender: object) -> None:
    """What the worker signals once a task has run."""
    signals.task_postrun.send(
        sender=sender, task_id="t1", task=sender, args=(), kwargs={}, retval=None, state="SUCCESS"
    )


@pytest.mark.worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_database_connection_from_one_task_to_the_next(worker, planner, coder):
    worker.restart()  # a worker that has not connected yet
    before = backends()

    planner.post("run.started", {"run": "r0", "tasks": [task("a")]})
    first = eventually(lambda: not FrontierChange.objects.exists() and backends() - before)
    for n in range(1, 11):
        planner.post("run.started", {"run": f"r{n}", "tasks": [task("a")]})
        eventually(lambda: not FrontierChange.objects.exists())

    assert first <= backends()  # the same sessions, not new ones
    assert len(backends() - before) <= 4  # at most one per worker thread, not one per task


@pytest.mark.django_db(transaction=True)
def test_after_a_task_a_connection_past_its_max_age_is_closed_and_a_younger_one_kept():
    connection.ensure_connection()
    kept = connection.connection
    connection.close_at = time.monotonic() + 60
    finished(deliver)
    assert connection.connection is kept

    connection.close_at = time.monotonic() - 1
    finished(deliver)
    assert connection.connection is None


@pytest.mark.django_db(transaction=True)
def test_an_eager_task_leaves_its_callers_transaction_alone():
    with transaction.atomic():
        connection.ensure_connection()
        kept = connection.connection
        connection.close_at = time.monotonic() - 1
        assert deliver.apply((0,)).get() == "skipped"
        assert connection.connection is kept
