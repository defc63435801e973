"""Killed background work, as the seed's PR: one Resume, then a progress line and carry on.

A later failure names that work ahead of its own cause: in the API, in the decisions and in
run.failed. An attempt that ended in an error is neither resumed nor warned about.
"""

from typing import Any

import pytest
from django.test import TestCase

from fleet.models import Fleet
from runs.models import Attempt, ProgressLine, Run, Task
from tests.conftest import Sender, task
from tests.runs.test_retries import (
    RUN,
    api,
    decisions,
    fail,
    finish,
    last_decision,
    sent,
    start,
    state,
)

pytestmark = pytest.mark.django_db

KILLED = [{"task": "./mvnw test"}]
LINE = (
    "implement: the Resume ended with a background task still running (./mvnw test), "
    "which was killed; carrying on"
)
NO_SESSION_LINE = (
    "implement: there was no session to resume; the session ended with a background task still "
    "running (./mvnw test), which was killed; carrying on"
)
CAUSE = (
    "implement session ended with a background task still running (./mvnw test), which was "
    "killed, and a later step failed: no PR found"
)


@pytest.fixture
def implement_run(hooked: Fleet, planner: Sender, coder: Sender, pr_tool: Sender) -> None:
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [
            task("implement"),
            task("open-pr", agent="pr-check", prerequisites=["implement"]),
        ]},
    )  # fmt: skip


def lines() -> list[str]:
    return list(ProgressLine.objects.values_list("text", flat=True))


def leaves_work_running(sender: Sender, outcome: str = "succeeded", **data: Any) -> None:
    started = start(sender, "implement")
    assert started.status_code == 202, started.json()
    finish(sender, "implement", outcome, background_killed=KILLED, **data)


def test_a_resume_that_ends_with_killed_background_work_is_warned_about_and_the_run_goes_on(
    client, implement_run, coder, receiver
):
    leaves_work_running(coder, resumable=True)

    resume = last_decision("implement")
    assert resume.action == "resume"
    assert "resumed once with the same context" in resume.reason
    [asked] = sent(receiver, "task.resume", "implement")
    assert asked["killed"] == ["./mvnw test"] and asked["agent"] == "coder"
    # Its outcome waits for the Resume: nothing downstream was released.
    assert state("implement") == "pending"
    assert sent(receiver, "task.ready", "open-pr") == []
    context = api(client, coder, f"/api/v1/runs/{RUN}/tasks/implement/context")
    assert context["decision"] == "resume"

    leaves_work_running(coder, resumable=True)  # the Resume leaves it running again

    assert Attempt.objects.filter(task__key="implement").count() == 2  # one Resume, never two
    assert Attempt.objects.get(task__key="implement", number=2).resumed
    assert [d.action for d in decisions("implement")] == ["resume", "carry_on"]
    assert lines() == [LINE]
    assert state("implement") == "succeeded"  # the outcome stands
    assert Task.objects.get(key="open-pr").ready
    assert sent(receiver, "task.ready", "open-pr")
    detail = api(client, coder, f"/api/v1/runs/{RUN}")
    assert detail["progress"][0]["text"] == LINE
    assert detail["progress"][0]["killed"] == ["./mvnw test"]
    assert detail["state"] == "running" and detail["cause"] is None


def test_a_session_with_no_id_to_resume_that_ends_with_killed_background_work_is_warned_about_too(
    implement_run, coder, receiver
):
    leaves_work_running(coder, resumable=False)

    assert Attempt.objects.filter(task__key="implement").count() == 1
    carry_on = last_decision("implement")
    assert carry_on.action == "carry_on"
    assert "its session cannot be resumed" in carry_on.reason
    assert lines() == [NO_SESSION_LINE]
    assert state("implement") == "succeeded"
    assert sent(receiver, "task.resume") == []


def test_a_run_that_fails_after_killed_background_work_names_that_work_too(
    client, implement_run, coder, pr_tool, receiver
):
    leaves_work_running(coder, resumable=False)
    assert start(pr_tool, "open-pr").status_code == 202

    fail(pr_tool, "open-pr", kind="environment", signature="no-pr", message="no PR found")

    run = Run.objects.get(key=RUN)
    assert (run.state, run.cause) == ("failed", CAUSE)
    [failed] = sent(receiver, "run.failed")
    assert failed["cause"] == CAUSE
    detail = api(client, coder, f"/api/v1/runs/{RUN}")
    assert detail["cause"] == CAUSE
    last = detail["decisions"][-1]
    assert (last["task"], last["action"], last["cause"]) == ("open-pr", "abort", CAUSE)
    assert last["reason"].startswith(CAUSE + ". Fail the run:")


def test_a_later_failure_the_policy_handles_names_the_killed_work_in_its_decision(
    client, hooked, planner, coder
):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("implement"), task("review", prerequisites=["implement"])]},
    )
    leaves_work_running(coder, resumable=False)
    start(coder, "review")

    fail(coder, "review", signature="no-pr", message="no PR found")

    decision = last_decision("review")
    named = (
        "implement session ended with a background task still running (./mvnw test), which "
        "was killed, and a later step failed: no PR found"
    )
    assert decision.action == "reframe"
    assert decision.reason.startswith(named + ". Reframe:")
    row = api(client, coder, f"/api/v1/runs/{RUN}")["decisions"][-1]
    assert row["cause"] == named


def test_a_resume_that_fails_again_with_killed_work_carries_on_and_its_failure_is_decided(
    implement_run, coder
):
    leaves_work_running(coder, resumable=True)
    start(coder, "implement")

    fail(coder, "implement", signature="no-pr", message="no PR found", background_killed=KILLED,
         resumable=True)  # fmt: skip

    assert [d.action for d in decisions("implement")] == ["resume", "carry_on", "reframe"]
    assert lines() == [LINE]
    assert last_decision("implement").reason.startswith(
        "implement session ended with a background task still running (./mvnw test), which "
        "was killed, and a later step failed: no PR found. Reframe:"
    )


def test_a_failure_the_resume_waited_for_is_settled_by_the_resumes_own_outcome(
    implement_run, coder
):
    leaves_work_running(coder, "failed", resumable=True,
                        failure={"kind": "reasoning", "signature": "no-result"})  # fmt: skip
    assert last_decision("implement").action == "resume"
    start(coder, "implement")

    finish(coder, "implement")

    assert state("implement") == "succeeded"
    assert [d.action for d in decisions("implement")] == ["resume"]
    assert lines() == []


def test_a_session_that_ends_in_an_error_with_killed_background_work_is_not_resumed_or_warned_about(
    client, implement_run, coder, receiver
):
    leaves_work_running(coder, "failed", resumable=True,
                        failure={"kind": "error", "signature": "exit-3", "message": "claude exited 3"})  # fmt: skip

    assert Attempt.objects.filter(task__key="implement").count() == 1
    assert lines() == []
    assert sent(receiver, "task.resume") == []
    decision = last_decision("implement")
    assert decision.action == "reframe"
    assert "background" not in decision.reason
    row = api(client, coder, f"/api/v1/runs/{RUN}")["decisions"][-1]
    assert row["cause"] == "implement: claude exited 3"


def test_a_run_waiting_on_a_resume_has_not_succeeded(hooked, planner, coder, receiver):
    planner.post("run.started", {"run": RUN, "tasks": [task("implement")]})

    leaves_work_running(coder, resumable=True)

    assert Run.objects.get(key=RUN).state == "running"
    assert sent(receiver, "run.succeeded") == []
    leaves_work_running(coder, resumable=True)
    assert Run.objects.get(key=RUN).state == "succeeded"
    assert sent(receiver, "run.succeeded") == [{"run": RUN}]


def test_work_killed_in_two_tasks_is_named_in_order_each_once(hooked, planner, coder, pr_tool):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [
            task("implement"),
            task("docs", prerequisites=["implement"]),
            task("open-pr", agent="pr-check", prerequisites=["docs"]),
        ]},
    )  # fmt: skip
    leaves_work_running(coder, resumable=False)
    start(coder, "docs")
    finish(coder, "docs", background_killed=[{"task": "mkdocs serve"}, {"task": "mkdocs serve"}])
    start(pr_tool, "open-pr")

    fail(pr_tool, "open-pr", kind="environment", signature="no-pr", message="no PR found")

    assert Run.objects.get(key=RUN).cause == (
        "implement session ended with a background task still running (./mvnw test), which "
        "was killed, and docs session ended with a background task still running (mkdocs "
        "serve), which was killed, and a later step failed: no PR found"
    )


def test_nothing_downstream_may_start_while_the_resume_is_still_to_be_decided(
    implement_run, coder, pr_tool, receiver, monkeypatch
):
    from runs import retries, tasks

    held: list[int] = []
    monkeypatch.setattr(tasks.after_attempt, "delay", held.append)  # the worker is slow today
    leaves_work_running(coder, resumable=True)
    # Until the policy has decided (it may resume it), the outcome does not stand.
    assert state("implement") == "running"
    assert not Task.objects.get(key="open-pr").ready
    refused = start(pr_tool, "open-pr")
    assert refused.status_code == 409, refused.json()
    assert "prerequisite:implement" in str(refused.json())
    again = coder.post(
        "task.finished",
        {"run": RUN, "task": "implement", "outcome": "failed",
         "failure": {"kind": "reasoning", "signature": "s", "message": ""}},
    )  # fmt: skip
    assert again.status_code == 409  # the attempt has finished already
    monkeypatch.undo()

    with TestCase.captureOnCommitCallbacks(execute=True):
        retries.after_attempt(held[0])

    assert last_decision("implement").action == "resume"
    assert state("implement") == "pending"
    assert sent(receiver, "task.ready", "open-pr") == []


def test_a_succeeded_attempt_stands_once_its_killed_work_is_carried_on(
    implement_run, coder, pr_tool, receiver, monkeypatch
):
    from runs import retries, tasks

    held: list[int] = []
    monkeypatch.setattr(tasks.after_attempt, "delay", held.append)
    leaves_work_running(coder, resumable=False)
    assert state("implement") == "running"
    monkeypatch.undo()

    with TestCase.captureOnCommitCallbacks(execute=True):
        retries.after_attempt(held[0])

    assert last_decision("implement").action == "carry_on"
    assert state("implement") == "succeeded"
    assert Task.objects.get(key="implement").finished_at is not None
    assert Task.objects.get(key="open-pr").ready
    assert start(pr_tool, "open-pr").status_code == 202


def test_a_reframed_attempt_is_a_new_session_and_gets_its_own_resume(
    implement_run, coder, receiver
):
    leaves_work_running(coder, resumable=True)
    assert start(coder, "implement").status_code == 202  # the Resume
    fail(coder, "implement", signature="no-pr", message="no PR found")
    assert last_decision("implement").action == "reframe"

    assert start(coder, "implement", context="c2").status_code == 202  # a new session
    finish(coder, "implement", background_killed=KILLED, resumable=True)

    assert [d.action for d in decisions("implement")] == ["resume", "reframe", "resume"]
    assert len(sent(receiver, "task.resume", "implement")) == 2
    assert start(coder, "implement", context="c2").status_code == 202  # its own Resume
    finish(coder, "implement", background_killed=KILLED, resumable=True)

    assert [d.action for d in decisions("implement")][-1] == "carry_on"
    assert lines() == [LINE]
    assert state("implement") == "succeeded"


def test_an_attempts_own_failure_with_no_session_to_resume_is_worded_as_the_seed_words_it(
    client, implement_run, coder
):
    started = start(coder, "implement")
    assert started.status_code == 202, started.json()

    fail(coder, "implement", signature="no-pr", message="no PR found", background_killed=KILLED)

    assert lines() == [NO_SESSION_LINE]
    assert [d.action for d in decisions("implement")] == ["carry_on", "reframe"]
    assert last_decision("implement").reason.startswith(CAUSE + ". Reframe:")
    row = api(client, coder, f"/api/v1/runs/{RUN}")["decisions"][-1]
    assert row["cause"] == CAUSE
