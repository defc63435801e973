"""The scheduler with a real worker on PostgreSQL: releases survive a worker killed mid-recompute."""

import time

import psycopg
import pytest

from fleet.tasks import reconcile
from runs.models import Blocker, FrontierChange, Run, Task
from tests.conftest import database_url, eventually, task

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}


def settled(run: Run) -> bool:
    return not FrontierChange.objects.filter(run=run).exists()


def forge_blocked() -> bool:
    return Blocker.objects.filter(
        task__key="push", code="capability:forge", cleared_at=None
    ).exists()


@pytest.mark.postgres
def test_the_forge_coming_back_is_released_by_the_worker_in_one_round(worker, planner, coder):
    tasks = [
        task("local"),
        task("push", capabilities=["forge"]),
        task("after", prerequisites=["push"]),
    ]
    planner.post("run.started", {"run": "r1", "tasks": tasks})
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    eventually(forge_blocked)
    assert Task.objects.get(key="local").ready
    planner.post("capability.changed", {"capability": "forge", "status": "up"})
    eventually(lambda: Task.objects.get(key="push").ready)
    assert not forge_blocked()
    assert (
        coder.post("task.started", {"run": "r1", "task": "push", "attempt": ATTEMPT}).status_code
        == 202
    )


@pytest.mark.postgres
def test_a_worker_killed_in_the_middle_of_a_recompute_loses_no_release(worker, planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": [task("push", capabilities=["forge"])]})
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    eventually(forge_blocked)
    run = Run.objects.get(key="r1")
    eventually(lambda: settled(run))

    # Hold the task's row so that the next recompute stops inside its transaction, after it
    # has cleared the blocker and before it commits the release.
    push = Task.objects.get(key="push")
    with psycopg.connect(database_url()) as holder:
        holder.execute("SELECT id FROM runs_task WHERE id = %s FOR UPDATE", [push.pk])
        planner.post("capability.changed", {"capability": "forge", "status": "up"})

        def recompute_waiting() -> bool:
            with psycopg.connect(database_url(), autocommit=True) as probe:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE %s",
                    ['UPDATE "runs_task"%'],
                ).fetchone()
                return bool(row and row[0])

        eventually(recompute_waiting)
        worker.kill()
        holder.rollback()

    time.sleep(0.5)
    assert forge_blocked(), "the killed recompute must not have released anything"
    assert not settled(run)
    worker.restart()
    reconcile.delay()
    eventually(lambda: Task.objects.get(key="push").ready)
    assert not forge_blocked()
    eventually(lambda: settled(run))
