"""The start gate against careless agents: an attempt does what the decision before it said,
re-reads what came back, and an external effect waits on what nobody reported."""

from typing import Any

import pytest

from fleet.models import ApiToken, Capability, Fleet
from runs import retries, task_state
from runs.models import Attempt, Decision, Task
from tests.conftest import Receiver, Sender, committed, make_sender, task
from tests.runs.conftest import open_codes

pytestmark = pytest.mark.django_db

RUN = "r1"


def start(sender: Sender, key: str, prompt: str = "p1", context: str = "c1", **data: Any) -> Any:
    attempt = {"prompt_hash": prompt, "context_hash": context}
    return sender.post("task.started", {"run": RUN, "task": key, "attempt": attempt, **data})


def fail(sender: Sender, key: str, signature: str = "wrong-total", kind: str = "reasoning") -> None:
    failure = {"kind": kind, "signature": signature, "message": ""}
    response = sender.post(
        "task.finished", {"run": RUN, "task": key, "outcome": "failed", "failure": failure}
    )
    assert response.status_code == 202, response.json()


def context(client: Any, sender: Sender, key: str) -> dict[str, Any]:
    _, token = ApiToken.issue(sender.agent)
    path = f"/api/v1/runs/{RUN}/tasks/{key}/context"
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()


def errors(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 409, response.content
    return response.json()["errors"]


def latest(key: str) -> Decision:
    return Decision.objects.filter(task__key=key).order_by("created_at", "id").last()  # type: ignore[return-value]


def tell(sender: Sender, capability: str, status: str, **data: Any) -> None:
    body = {"capability": capability, "status": status, "reason": f"{capability} {status}", **data}
    assert sender.post("capability.changed", body).status_code == 202


@pytest.fixture
def coder2(client: Any, fleet: Fleet) -> Sender:
    return make_sender(client, fleet, "coder-2", role="coding")


@pytest.fixture
def one_task(hooked: Fleet, planner: Sender, coder: Sender) -> None:
    planner.post("run.started", {"run": RUN, "tasks": [task("a")]})


# The policy checks what changed -----------------------------------------------------------------


def test_an_attempt_after_a_reframe_with_the_same_hashes_is_refused_naming_the_decision(
    client, one_task, coder
):
    assert start(coder, "a").status_code == 202
    fail(coder, "a")
    reframe = latest("a")
    assert reframe.action == "reframe"

    refused = errors(start(coder, "a"))  # the careless agent: same prompt, same context

    assert {
        "loc": "data.attempt",
        "msg": f"decision {reframe.pk} (reframe) reframed task 'a', but attempt 2 reports the "
        "same prompt_hash and context_hash as attempt 1: give it the decision's ground truth and "
        "scope (GET the task's context), so that its prompt or its context changes",
    } in refused
    assert Task.objects.get(key="a").state == "pending"
    assert Attempt.objects.filter(task__key="a").count() == 1


def test_the_context_says_what_must_change_and_a_changed_context_is_enough(client, one_task, coder):
    start(coder, "a", prompt="p1", context="c1")
    fail(coder, "a")
    told = context(client, coder, "a")
    assert told["decision"] == "reframe" and told["decision_id"] == latest("a").pk
    assert told["must_change"] == ["prompt_hash", "context_hash"]
    assert told["previous_attempt"] == {
        "number": 1,
        "agent": "coder",
        "prompt_hash": "p1",
        "context_hash": "c1",
    }

    # The same prompt with the ground truth in its context is a reframed attempt.
    assert start(coder, "a", prompt="p1", context="c1+ground-truth").status_code == 202
    assert Attempt.objects.get(task__key="a", number=2).reframed
    running = context(client, coder, "a")
    assert (running["must_change"], running["previous_attempt"]) == ([], None)


def test_a_retry_keeps_its_context_and_may_say_so(one_task, coder):
    start(coder, "a")
    fail(coder, "a", signature="429", kind="transient")
    retry = latest("a")
    assert retry.action == "retry"
    Decision.objects.filter(pk=retry.pk).update(not_before=retry.created_at)
    committed(retries.act_on_decision, retry.pk)
    assert start(coder, "a").status_code == 202


@pytest.fixture
def rerouted(one_task: None, coder: Sender, coder2: Sender) -> Decision:
    """Reframed once, then rerouted from coder to coder-2."""
    start(coder, "a", prompt="p1")
    fail(coder, "a", signature="wrong-total")
    start(coder, "a", prompt="p2")
    fail(coder, "a", signature="wrong-rounding")
    reroute = latest("a")
    assert (reroute.action, reroute.reroute_to) == ("reroute", "coder-2")
    return reroute


def test_a_rerouted_task_started_for_the_old_agent_by_an_orchestrator_is_refused(
    client, rerouted, planner, coder2
):
    refused = errors(start(planner, "a", prompt="p3", agent="coder"))

    assert {
        "loc": "data.agent",
        "msg": f"decision {rerouted.pk} (reroute) handed task 'a' to coder-2: attempt 3 is "
        "coder-2's to start, not coder's",
    } in refused
    # The orchestrator acting as itself ignores the reroute just the same.
    assert {"loc": "data.agent"}.items() <= errors(start(planner, "a", prompt="p3"))[1].items()
    assert context(client, planner, "a")["must_change"] == ["agent"]

    assert start(planner, "a", prompt="p3", agent="coder-2").status_code == 202
    attempt = Attempt.objects.get(task__key="a", number=3)
    assert attempt.rerouted and attempt.agent == coder2.agent


def test_the_old_agent_itself_is_told_the_task_is_no_longer_its_own(rerouted, coder):
    response = start(coder, "a", prompt="p3")
    assert response.status_code == 403
    assert "task 'a' is coder-2's, not coder's" in response.json()["errors"][0]["msg"]


# Uncertainty fails closed: unknown capabilities --------------------------------------------------


@pytest.fixture
def forge_work(planner: Sender, coder: Sender) -> None:
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [
            task("publish", capabilities=["forge"], effect="external"),
            task("branch", capabilities=["forge"], effect="reversible"),
            task("read-issues", reads_state_of=["forge"]),
        ]},
    )  # fmt: skip


def test_a_capability_a_task_names_is_unknown_until_someone_reports_it(forge_work):
    forge = Capability.objects.get(name="forge")
    assert (forge.status, forge.changed_by) == ("unknown", "")


def test_an_external_effect_on_an_unknown_capability_waits_and_says_why(forge_work, planner, coder):
    assert open_codes("publish") == {"capability:forge"}
    refused = errors(start(coder, "publish"))
    assert {"loc": "blockers", "msg": "capability:forge"} in refused
    assert {
        "loc": "capabilities.forge",
        "msg": "forge is unknown: nobody has reported on it, and an external effect waits "
        "until it is reported up",
    } in refused
    # Reversible work and reads go on.
    assert start(coder, "branch").status_code == 202
    assert start(coder, "read-issues").status_code == 202

    tell(planner, "forge", "up")
    assert open_codes("publish") == set()
    assert start(coder, "publish").status_code == 202


def test_a_down_capability_says_why_at_the_gate(forge_work, planner, coder):
    tell(planner, "forge", "down")
    assert {"loc": "capabilities.forge", "msg": "forge is down: forge down"} in errors(
        start(coder, "branch")
    )


# Unnamed roles: the fleet's setting -------------------------------------------------------------


@pytest.fixture
def deploy(fleet: Fleet, planner: Sender, coder: Sender) -> None:
    planner.post(
        "run.started", {"run": RUN, "tasks": [task("deploy", effect="external"), task("build")]}
    )


def stop_unnamed_roles(fleet: Fleet, on: bool = True) -> None:
    from runs.capabilities import unnamed_roles_stop_set

    committed(unnamed_roles_stop_set, fleet=fleet, on=on)


def test_with_the_setting_unnamed_roles_stop_external_effects_saying_which(
    fleet, deploy, planner, coder
):
    assert open_codes("deploy") == set()  # off by default: the fleet has not asked for it
    stop_unnamed_roles(fleet)
    assert open_codes("deploy") == {"barrier:uncertain-dependency"}
    assert open_codes("build") == set()
    tell(planner, "iam", "up", role="authority")

    refused = errors(start(coder, "deploy"))

    assert {
        "loc": "barriers.uncertain-dependency",
        "msg": "the fleet names no observability or rollback capability, and it holds every "
        "external effect at a stop until a reviewer releases it",
    } in refused


def test_a_reviewer_releases_the_stop_that_unnamed_roles_put_on_an_external_effect(
    fleet, deploy, coder
):
    stop_unnamed_roles(fleet)
    row = Task.objects.select_related("run").get(key="deploy")
    committed(task_state.release_stop, task=row, by="alice", at=row.created_at)
    assert open_codes("deploy") == set()
    assert start(coder, "deploy").status_code == 202


def test_naming_every_role_lifts_the_stop(fleet, deploy, planner, coder):
    stop_unnamed_roles(fleet)
    for name, role in (("iam", "authority"), ("metrics", "observability"), ("snap", "rollback")):
        tell(planner, name, "up", role=role)
    assert open_codes("deploy") == set()
    assert start(coder, "deploy").status_code == 202


# A capability that comes back: the state read before it went down is stale ---------------------


@pytest.fixture
def report_run(hooked: Fleet, planner: Sender, coder: Sender) -> None:
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [
            task("report", reads_state_of=["forge"]),
            task("push", capabilities=["forge"]),
        ]},
    )  # fmt: skip
    tell(planner, "forge", "up")
    tell(planner, "forge", "down")


def ready_notes(receiver: Receiver, key: str) -> list[dict[str, Any]]:
    return [r.body["data"] for r in receiver.of_type("task.ready") if r.body["data"]["task"] == key]


def test_a_task_that_reads_a_capability_that_came_back_must_say_it_refreshed(
    client, report_run, planner, coder, receiver
):
    assert open_codes("report") == {"barrier:freshness"}
    tell(planner, "forge", "up")

    assert ready_notes(receiver, "report")[-1] == {
        "run": RUN,
        "task": "report",
        "agent": "coder",
        "refresh": ["forge"],
    }
    assert context(client, coder, "report")["refresh"] == ["forge"]
    # It only needs the forge, it reads nothing of it: nothing to refresh.
    assert "refresh" not in ready_notes(receiver, "push")[-1]

    refused = errors(start(coder, "report"))  # the careless agent skips `refreshed`
    assert {
        "loc": "data.refreshed",
        "msg": "forge came back after being down, and task 'report' reads its state: re-read "
        'it, then start with refreshed: ["forge"]',
    } in refused
    assert Task.objects.get(key="report").state == "pending"

    assert start(coder, "report", refreshed=["forge"]).status_code == 202
    assert Attempt.objects.get(task__key="report").refreshed == ["forge"]
    assert context(client, coder, "report")["refresh"] == []


def test_a_capability_reported_up_for_the_first_time_asks_for_no_refresh(
    client, hooked, planner, coder
):
    planner.post("run.started", {"run": RUN, "tasks": [task("report", reads_state_of=["forge"])]})
    tell(planner, "forge", "up")
    assert Task.objects.get(key="report").refresh == []
    assert start(coder, "report").status_code == 202


def test_a_refresh_is_asked_of_work_not_yet_started_only(report_run, planner, coder):
    tell(planner, "forge", "up")
    start(coder, "report", refreshed=["forge"])
    tell(planner, "forge", "down")
    tell(planner, "forge", "up")  # it is running: it read the state when it started
    assert Task.objects.get(key="report").refresh == []


def test_a_start_refused_for_stale_state_says_which_capability_is_down(report_run, coder):
    refused = errors(start(coder, "report"))
    assert {"loc": "blockers", "msg": "barrier:freshness"} in refused
    assert {
        "loc": "barriers.freshness",
        "msg": "report reads the state of forge, which is down: what it would read is stale; "
        "it starts once that is back (and re-read)",
    } in refused
