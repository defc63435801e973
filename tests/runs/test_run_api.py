"""GET /api/v1/runs/<run> and its frontier: `ready` only for a pending task of a running run."""

import pytest
from django.test import TestCase

from escalations import services as desk
from escalations.models import Escalation
from runs.models import Run, Task
from tests.conftest import task
from tests.escalations.desk import member, packet

pytestmark = pytest.mark.django_db

ATTEMPT = {"prompt_hash": "p", "context_hash": "c"}


def read(client, path: str, token: str) -> dict:
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()


def ready_of(client, token: str, run: str = "r1") -> dict[str, tuple[str, bool]]:
    body = read(client, f"/api/v1/runs/{run}", token)
    return {t["key"]: (t["state"], t["ready"]) for t in body["tasks"]}


def test_a_started_or_finished_task_is_not_ready(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b")]})
    assert ready_of(client, token) == {"a": ("pending", True), "b": ("pending", True)}
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    assert ready_of(client, token)["a"] == ("running", False)
    coder.post("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"})
    assert ready_of(client, token) == {"a": ("succeeded", False), "b": ("pending", True)}
    coder.post("task.started", {"run": "r1", "task": "b", "attempt": ATTEMPT})
    coder.post("task.finished", {"run": "r1", "task": "b", "outcome": "succeeded"})
    assert Run.objects.get(key="r1").state == "succeeded"
    assert ready_of(client, token) == {"a": ("succeeded", False), "b": ("succeeded", False)}


def test_a_failed_runs_pending_tasks_are_not_ready(client, planner, coder, token):
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b")]})
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    submitted = coder.post("packet.submitted", {"run": "r1", "task": "a", "packet": packet("a")})
    assert submitted.status_code == 202, submitted.content
    escalation = Escalation.objects.get(pk=submitted.json()["escalation"])
    with TestCase.captureOnCommitCallbacks(execute=True):
        desk.escalation_abort(
            escalation=escalation, reviewer=member("alice", planner.agent.fleet), reason="stop"
        )
    assert Run.objects.get(key="r1").state == "failed"
    assert Task.objects.get(key="b").state == "pending"
    assert ready_of(client, token)["b"] == ("pending", False)
    frontier = read(client, "/api/v1/runs/r1/frontier", token)
    assert frontier["ready"] == []


def test_an_imported_runs_finished_tasks_are_not_ready(client, planner, coder, token):
    import json

    from fleet.management.commands.import_events import import_events

    def line(agent: str, type: str, minute: int, data: dict) -> str:
        stamp = f"2026-06-02T09:{minute:02d}:00Z"
        return json.dumps({"agent": agent, "type": type, "timestamp": stamp, "data": data})

    lines = [
        line("planner", "run.started", 0, {"run": "past", "tasks": [task("a"), task("b")]}),
        line("coder", "task.finished", 5, {"run": "past", "task": "a", "outcome": "succeeded"}),
    ]
    for text in lines:  # two imports: the run's tasks were ready before the finish arrived
        with TestCase.captureOnCommitCallbacks(execute=True):
            report = import_events(fleet=planner.agent.fleet, content=text.encode())
        assert not report.errors
    assert ready_of(client, token, "past") == {"a": ("succeeded", False), "b": ("pending", True)}


def test_the_run_says_what_the_frontier_says_before_the_worker_catches_up(
    client, planner, coder, token, monkeypatch
):
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b", prerequisites=["a"])]})
    coder.post("task.started", {"run": "r1", "task": "a", "attempt": ATTEMPT})
    monkeypatch.setattr(
        "runs.tasks.recompute.delay", lambda *args, **kwargs: None
    )  # the worker is slow
    coder.post("task.finished", {"run": "r1", "task": "a", "outcome": "succeeded"})

    frontier = read(client, "/api/v1/runs/r1/frontier", token)
    tasks = {t["key"]: t for t in read(client, "/api/v1/runs/r1", token)["tasks"]}
    assert frontier["ready"] == ["b"]
    assert (tasks["b"]["ready"], tasks["b"]["blockers"]) == (True, [])
