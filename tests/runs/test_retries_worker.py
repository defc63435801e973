"""The retry wiring with a real worker on PostgreSQL and the configured broker (Redis in CI).

The worker runs the policy after commit and the receiver on loopback gets what an agent gets.
Time is moved in the database (a retry's not_before), never slept through.
"""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from fleet.models import Capability
from fleet.tasks import reconcile
from runs import retries
from runs.models import Blocker, Decision, ProgressLine, Run, Task
from runs.tasks import act_on_decision
from tests.conftest import Sender, eventually, task
from tests.runs.test_retries import RUN, decisions, fail, finish, sent, start

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def decided(key: str, n: int) -> Decision:
    """Wait for the worker's n-th decision on the task."""
    eventually(lambda: len(decisions(key)) >= n)
    return decisions(key)[n - 1]


def in_state(key: str, state: str) -> None:
    eventually(lambda: Task.objects.get(key=key).state == state)


def due_now(decision: Decision) -> None:
    """The retry's time has come: move it, and let the reconciler find it."""
    Decision.objects.filter(pk=decision.pk).update(not_before=timezone.now())
    reconcile.delay()


def fails(sender: Sender, key: str, prompt: str = "p1", **failure: Any) -> None:
    started = start(sender, key, prompt)
    assert started.status_code == 202, started.json()
    fail(sender, key, **failure)


def ran(worker: Any, name: str) -> int:
    """How many times the current worker process has finished the Celery task `name`."""
    return sum(
        1 for line in worker.log().splitlines() if f"Task {name}[" in line and "succeeded" in line
    )


def test_a_transient_failure_is_retried_with_backoff_then_handed_to_the_scheduler(
    worker, hooked, receiver, planner, coder
):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("push", capabilities=["forge"]), task("local")]},
    )
    config = retries.retry_config()
    for n in (1, 2, 3):
        fails(coder, "push", kind="transient", signature="forge-502", capability="forge")
        retry = decided("push", n)
        assert retry.action == "retry"
        assert retry.not_before is not None
        backoff = retry.not_before - retry.created_at
        assert backoff >= timedelta(seconds=config.base_delay_s * 2 ** (n - 1))
        eventually(lambda n=n: len(sent(receiver, "task.retry", "push")) == n)
        due_now(retry)
        in_state("push", "pending")

    assert decisions("push")[-1].trip_capability == "forge"
    assert Capability.objects.get(name="forge").status == "down"
    eventually(
        lambda: Blocker.objects.filter(
            task__key="push", code="capability:forge", cleared_at=None
        ).exists()
    )
    eventually(lambda: sent(receiver, "task.deferred", "push"))
    assert start(coder, "push").status_code == 409

    planner.post("capability.changed", {"capability": "forge", "status": "up", "reason": "back"})
    eventually(lambda: Task.objects.get(key="push").ready)

    fails(coder, "push", kind="transient", signature="forge-502", capability="forge")
    after_budget = decided("push", 4)
    assert after_budget.action == "reframe"
    assert "the task's retry budget is spent (3 of 3 used)" in after_budget.reason


def test_a_retry_due_in_an_hour_survives_a_worker_restart_and_runs_once(
    worker, hooked, receiver, planner, coder
):
    planner.post("run.started", {"run": RUN, "tasks": [task("a"), task("b", prerequisites=["a"])]})
    fails(coder, "a", kind="transient", signature="timeout")
    retry = decided("a", 1)
    Decision.objects.filter(pk=retry.pk).update(not_before=timezone.now() + timedelta(hours=1))

    worker.kill()
    worker.restart()
    # Woken early (its message, a redelivery, the reconciler): it does nothing.
    assert retries.act_on_decision(retry.pk).acted_at is None
    reconcile.delay()
    eventually(lambda: ran(worker, "fleet.tasks.reconcile") >= 1)
    assert Task.objects.get(key="a").state == "failed"

    readied = len(sent(receiver, "task.ready", "a"))
    due_now(retry)  # an hour later
    in_state("a", "pending")
    eventually(lambda: len(sent(receiver, "task.ready", "a")) == readied + 1)
    retry.refresh_from_db()
    acted = retry.acted_at
    assert acted is not None

    # Every message that could still stand for it comes in; none acts again.
    worker.restart()
    act_on_decision.delay(retry.pk)
    act_on_decision.delay(retry.pk)
    reconcile.delay()
    eventually(lambda: ran(worker, "runs.tasks.act_on_decision") >= 2)
    eventually(lambda: ran(worker, "fleet.tasks.reconcile") >= 1)
    retry.refresh_from_db()
    assert retry.acted_at == acted
    assert len(sent(receiver, "task.ready", "a")) == readied + 1
    assert start(coder, "a").status_code == 202


def test_two_differently_prompted_failures_alike_are_escalated_and_the_agent_is_asked(
    worker, hooked, receiver, planner, coder
):
    planner.post("run.started", {"run": RUN, "tasks": [task("a")]})
    fails(coder, "a", prompt="p1", kind="spec", signature="no-tier-source")
    assert decided("a", 1).action == "reframe"
    in_state("a", "pending")

    fails(coder, "a", prompt="p2", kind="spec", signature="no-tier-source")

    escalate = decided("a", 2)
    assert escalate.action == "escalate"
    assert escalate.reason.startswith("Signal rule")
    in_state("a", "escalated")
    eventually(lambda: receiver.of_type("packet.requested"))
    [asked] = receiver.of_type("packet.requested")
    assert asked.signed
    assert asked.body["data"]["agent"] == "coder"
    assert asked.body["data"]["reason"] == escalate.reason


def test_a_reasoning_failure_is_reframed_then_rerouted_then_escalated(
    worker, hooked, receiver, planner, coder, coder2
):
    planner.post("run.started", {"run": RUN, "tasks": [task("a")]})
    fails(coder, "a", prompt="p1", signature="wrong-total")
    assert decided("a", 1).action == "reframe"
    in_state("a", "pending")
    fails(coder, "a", prompt="p2", signature="wrong-rounding")
    assert decided("a", 2).action == "reroute"
    eventually(lambda: Task.objects.get(key="a").agent.name == "coder-2")
    in_state("a", "pending")

    fails(coder2, "a", prompt="p3", signature="wrong-currency")

    assert decided("a", 3).action == "escalate"
    eventually(lambda: sent(receiver, "packet.requested", "a"))
    assert [d.action for d in decisions("a")] == ["reframe", "reroute", "escalate"]
    kinds = [r.type for r in receiver.received if r.body["data"].get("task") == "a"]
    assert (
        kinds.index("task.reframed")
        < kinds.index("task.rerouted")
        < kinds.index("packet.requested")
    )


def test_the_hung_test_run_carries_on_and_its_failure_names_the_killed_work(
    worker, hooked, receiver, planner, coder, pr_tool
):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("implement"),
                               task("open-pr", agent="pr-check", prerequisites=["implement"])]},
    )  # fmt: skip
    killed = {"background_killed": [{"task": "./mvnw test"}], "resumable": True}
    assert start(coder, "implement").status_code == 202
    finish(coder, "implement", **killed)
    assert decided("implement", 1).action == "resume"
    in_state("implement", "pending")
    eventually(lambda: sent(receiver, "task.resume", "implement"))
    assert start(coder, "implement").status_code == 202
    finish(coder, "implement", **killed)
    assert decided("implement", 2).action == "carry_on"
    in_state("implement", "succeeded")
    assert list(ProgressLine.objects.values_list("text", flat=True)) == [
        "implement: the Resume ended with a background task still running (./mvnw test), "
        "which was killed; carrying on"
    ]
    eventually(lambda: Task.objects.get(key="open-pr").ready)

    assert start(pr_tool, "open-pr").status_code == 202
    fail(pr_tool, "open-pr", kind="environment", signature="no-pr", message="no PR found")

    cause = (
        "implement session ended with a background task still running (./mvnw test), which "
        "was killed, and a later step failed: no PR found"
    )
    eventually(lambda: Run.objects.get(key=RUN).state == "failed")
    assert Run.objects.get(key=RUN).cause == cause
    eventually(lambda: receiver.of_type("run.failed"))
    [failed] = receiver.of_type("run.failed")
    assert failed.signed and failed.body["data"]["cause"] == cause
