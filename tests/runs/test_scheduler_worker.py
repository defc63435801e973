"""The scheduler with a real worker on PostgreSQL: releases survive a worker killed mid-recompute."""

import psycopg
import pytest

from fleet.models import Delivery
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


def task_updates(where: str) -> int:
    """The other sessions of the test database updating a task that match `where`."""
    with psycopg.connect(database_url(), autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            f"AND pid <> pg_backend_pid() AND query LIKE %s AND {where}",
            ['UPDATE "runs_task"%'],
        ).fetchone()
    return int(row[0]) if row else 0


def killed_recompute_ended() -> bool:
    """The killed worker's recompute has no session left: its transaction is over."""
    return task_updates("state <> 'idle'") == 0


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
            return task_updates("wait_event_type = 'Lock'") > 0

        eventually(recompute_waiting)
        worker.kill()
        holder.rollback()

    eventually(killed_recompute_ended)
    assert forge_blocked(), "the killed recompute must not have released anything"
    assert not settled(run)
    worker.restart()
    reconcile.delay()
    eventually(lambda: Task.objects.get(key="push").ready)
    assert not forge_blocked()
    eventually(lambda: settled(run))


def open_codes(key: str) -> set[str]:
    rows = Blocker.objects.filter(task__key=key, cleared_at=None)
    return set(rows.values_list("code", flat=True))


def start(sender, key: str, **data):
    return sender.post("task.started", {"run": "r1", "task": key, "attempt": ATTEMPT, **data})


@pytest.mark.postgres
def test_uncertainty_fails_closed_and_a_capability_back_asks_its_readers_to_refresh(
    worker, fleet, planner, coder
):
    fleet.callback_url = "http://127.0.0.1:9/unreachable"
    fleet.save(update_fields=["callback_url"])
    tasks = [
        task("report", reads_state_of=["forge"]),
        task("publish", capabilities=["forge"], effect="external"),
    ]
    planner.post("run.started", {"run": "r1", "tasks": tasks})
    # Nobody has reported on the forge: the external effect waits, the read goes on.
    eventually(lambda: open_codes("publish") == {"capability:forge"})
    eventually(lambda: Task.objects.get(key="report").ready)
    assert start(coder, "publish").status_code == 409

    planner.post("capability.changed", {"capability": "forge", "status": "up"})
    eventually(lambda: Task.objects.get(key="publish").ready)
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    eventually(lambda: open_codes("report") == {"barrier:freshness"})
    planner.post("capability.changed", {"capability": "forge", "status": "up"})

    def released() -> list[dict]:
        rows = Delivery.objects.filter(type="task.ready", payload__data__task="report")
        return [d.payload["data"] for d in rows.order_by("pk") if "refresh" in d.payload["data"]]

    eventually(released)
    assert released()[-1]["refresh"] == ["forge"]
    refused = start(coder, "report")
    assert refused.status_code == 409
    assert refused.json()["errors"][-1]["loc"] == "data.refreshed"
    assert start(coder, "report", refreshed=["forge"]).status_code == 202


@pytest.mark.postgres
def test_the_fleets_setting_stops_external_effects_while_a_role_is_unnamed(
    worker, fleet, planner, coder
):
    from django.db import transaction

    from runs.capabilities import unnamed_roles_stop_set

    planner.post("run.started", {"run": "r1", "tasks": [task("deploy", effect="external")]})
    eventually(lambda: Task.objects.get(key="deploy").ready)
    with transaction.atomic():
        unnamed_roles_stop_set(fleet=fleet, on=True)
    eventually(lambda: open_codes("deploy") == {"barrier:uncertain-dependency"})
    assert start(coder, "deploy").status_code == 409

    for name, role in (("iam", "authority"), ("metrics", "observability"), ("snap", "rollback")):
        body = {"capability": name, "status": "up", "reason": "named", "role": role}
        planner.post("capability.changed", body)
    eventually(lambda: Task.objects.get(key="deploy").ready)
    assert start(coder, "deploy").status_code == 202
