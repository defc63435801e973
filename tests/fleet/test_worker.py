"""A real Celery worker on the configured broker: after-commit work and the reconciler."""

import pytest

from fleet.tasks import reconcile
from runs.models import Blocker, FrontierChange, Run
from tests.conftest import eventually, task

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_recomputes_the_frontier_after_commit(worker, planner, coder):
    planner.post(
        "run.started", {"run": "r1", "tasks": [task("local"), task("push", capabilities=["forge"])]}
    )
    assert (
        planner.post("capability.changed", {"capability": "forge", "status": "down"}).status_code
        == 202
    )
    eventually(
        lambda: Blocker.objects.filter(
            task__key="push", code="capability:forge", cleared_at=None
        ).exists()
    )
    run = Run.objects.get(key="r1")
    eventually(lambda: not FrontierChange.objects.filter(run=run).exists())


def test_the_reconciler_recovers_work_whose_message_was_lost(worker, planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": [task("push", capabilities=["forge"])]})
    run = Run.objects.get(key="r1")
    eventually(lambda: not FrontierChange.objects.filter(run=run).exists())
    # The capability goes down but the message that stood for the recompute is lost.
    from fleet.models import Capability

    Capability.objects.filter(name="forge").update(status="down")
    FrontierChange.objects.create(run=run)
    assert not Blocker.objects.filter(code="capability:forge").exists()
    reconcile.delay()
    eventually(
        lambda: Blocker.objects.filter(
            task__key="push", code="capability:forge", cleared_at=None
        ).exists()
    )
