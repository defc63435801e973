"""The scheduler wired to events: only the work that needs a down capability waits."""

import pytest

from fleet.models import Delivery
from runs.models import Blocker, FrontierChange, Task
from tests.conftest import make_sender, task
from tests.runs.conftest import open_codes

pytestmark = pytest.mark.django_db

ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}


def forge_run() -> list[dict]:
    return [
        task("validate"),
        task("worklog"),
        task("push", capabilities=["forge"]),
        task("bot-commit", prerequisites=["push"], capabilities=["forge"]),
        task("announce", prerequisites=["bot-commit"]),
        task("deploy", effect="external", dependency_confidence="uncertain"),
    ]


def frontier(client, token: str, run: str = "r1") -> dict:
    return client.get(f"/api/v1/runs/{run}/frontier", HTTP_AUTHORIZATION=f"Bearer {token}").json()


def test_it_defers_only_the_tasks_that_need_the_forge(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "outage"}
    )
    body = frontier(client, token)
    assert body["ready"] == ["validate", "worklog"]
    deferred = {d["task"]: d["blockers"] for d in body["deferred"]}
    assert deferred["push"] == ["capability:forge"]
    assert deferred["bot-commit"] == ["capability:forge", "prerequisite:push"]
    assert deferred["announce"] == ["prerequisite:bot-commit"]
    assert deferred["deploy"] == ["barrier:uncertain-dependency"]
    # The stored frontier (the checkpoint) says the same.
    assert open_codes("push") == {"capability:forge"}
    assert set(Task.objects.filter(ready=True).values_list("key", flat=True)) == {
        "validate",
        "worklog",
    }


def test_a_task_outside_the_frontier_is_refused_with_its_blockers(planner, coder):
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "outage"}
    )
    response = coder.post("task.started", {"run": "r1", "task": "push", "attempt": ATTEMPT})
    assert response.status_code == 409
    assert {"loc": "blockers", "msg": "capability:forge"} in response.json()["errors"]
    assert (
        coder.post(
            "task.started", {"run": "r1", "task": "validate", "attempt": ATTEMPT}
        ).status_code
        == 202
    )


def test_an_external_task_with_an_uncertain_dependency_never_enters_the_frontier(
    client, planner, coder, token
):
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    assert "deploy" not in frontier(client, token)["ready"]
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    planner.post("capability.changed", {"capability": "forge", "status": "up"})
    assert "deploy" not in frontier(client, token)["ready"]
    response = coder.post("task.started", {"run": "r1", "task": "deploy", "attempt": ATTEMPT})
    assert {"loc": "blockers", "msg": "barrier:uncertain-dependency"} in response.json()["errors"]


def test_the_forge_coming_back_releases_the_deferred_work_with_a_checkpoint(
    client, planner, coder, token
):
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    planner.post(
        "capability.changed", {"capability": "forge", "status": "down", "reason": "outage"}
    )
    for key in ("validate", "worklog"):
        coder.post("task.started", {"run": "r1", "task": key, "attempt": ATTEMPT})
        coder.post("task.finished", {"run": "r1", "task": key, "outcome": "succeeded"})
    planner.post(
        "capability.changed", {"capability": "forge", "status": "up", "reason": "restored"}
    )
    assert frontier(client, token)["ready"] == ["push"]
    assert Task.objects.get(key="push").ready
    cleared = Blocker.objects.get(task__key="push", code="capability:forge")
    assert cleared.set_at <= cleared.cleared_at
    assert not open_codes("push")


def test_a_capability_is_per_fleet_and_defers_every_run_that_needs_it(
    client, planner, coder, token
):
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    planner.post(
        "run.started",
        {"run": "r2", "tasks": [task("push-2", capabilities=["forge"]), task("lint")]},
    )
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    assert open_codes("push") == {"capability:forge"}
    assert open_codes("push-2") == {"capability:forge"}
    assert frontier(client, token, "r2")["ready"] == ["lint"]


def test_another_fleets_outage_does_not_touch_this_fleet(client, planner, coder, token):
    from fleet import services

    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    other = services.fleet_create(name="other")
    make_sender(client, other, "ops").post(
        "capability.changed", {"capability": "forge", "status": "down"}
    )
    assert "capability:forge" not in open_codes("push")


def test_global_halt_runs_nothing_while_a_needed_capability_is_down(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "policy": "global_halt", "tasks": forge_run()})
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    body = frontier(client, token)
    assert body["policy"] == "global_halt"
    assert body["ready"] == []
    assert all("halt:forge" in d["blockers"] for d in body["deferred"])


def test_the_frontier_notifies_the_fleet_when_tasks_become_ready_or_deferred(planner, coder, fleet):
    fleet.callback_url = "http://127.0.0.1:9/hook"
    fleet.save()
    planner.post("run.started", {"run": "r1", "tasks": forge_run()})
    planner.post("capability.changed", {"capability": "forge", "status": "down"})
    ready = {d.payload["data"]["task"] for d in Delivery.objects.filter(type="task.ready")}
    deferred = {d.payload["data"]["task"] for d in Delivery.objects.filter(type="task.deferred")}
    assert ready >= {"validate", "worklog", "push"}
    assert "push" in deferred
    assert not FrontierChange.objects.filter(run__key="r1").exists()
