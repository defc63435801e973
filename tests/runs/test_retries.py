"""The retry policy wired to events: after a failure something changes before the next attempt."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from escalations.models import Escalation
from fleet.models import ApiToken, Capability, Delivery, Fleet
from fleet.tasks import reconcile
from runs import retries
from runs.claims import by_hand as claims
from runs.models import Attempt, Claim, Decision, Run, Task
from tests.conftest import Receiver, Sender, committed, make_sender, task
from tests.escalations.desk import packet
from tests.runs.conftest import open_codes

pytestmark = pytest.mark.django_db

RUN = "r1"


def start(sender: Sender, key: str, prompt: str = "p1", context: str = "c1") -> Any:
    return sender.post(
        "task.started",
        {"run": RUN, "task": key, "attempt": {"prompt_hash": prompt, "context_hash": context}},
    )


def finish(sender: Sender, key: str, outcome: str = "succeeded", **data: Any) -> Any:
    response = sender.post("task.finished", {"run": RUN, "task": key, "outcome": outcome, **data})
    assert response.status_code == 202, response.json()
    return response


def fail(
    sender: Sender,
    key: str,
    kind: str = "reasoning",
    signature: str = "wrong-answer",
    message: str = "",
    capability: str | None = None,
    **data: Any,
) -> Any:
    failure: dict[str, Any] = {"kind": kind, "signature": signature, "message": message}
    if capability:
        failure["capability"] = capability
    return finish(sender, key, "failed", failure=failure, **data)


def attempt(
    sender: Sender, key: str, prompt: str = "p1", context: str = "c1", **failure: Any
) -> None:
    """One attempt that fails: started, then finished with `failure`."""
    started = start(sender, key, prompt, context)
    assert started.status_code == 202, started.json()
    fail(sender, key, **failure)


def decisions(key: str) -> list[Decision]:
    return list(Decision.objects.filter(task__key=key).order_by("created_at", "id"))


def last_decision(key: str) -> Decision:
    found = decisions(key)
    assert found, f"no decision for {key}"
    return found[-1]


def state(key: str) -> str:
    return Task.objects.get(key=key).state


def make_due(decision: Decision) -> None:
    Decision.objects.filter(pk=decision.pk).update(not_before=timezone.now())


def act_when_due(decision: Decision) -> Decision | None:
    make_due(decision)
    return committed(lambda: retries.act_on_decision(decision.pk))


def sent(got: Receiver, type: str, key: str | None = None) -> list[dict[str, Any]]:
    return [
        r.body["data"]
        for r in got.of_type(type)
        if key is None or r.body["data"].get("task") == key
    ]


def test_a_run_the_policy_fails_closes_what_of_it_waits_for_a_person(
    hooked, planner, coder, formatter
):
    planner.post("run.started", {"run": RUN, "tasks": [task("fmt", agent="formatter"), task("b")]})
    assert start(coder, "b").status_code == 202
    stopped = coder.post("packet.submitted", {"run": RUN, "task": "b", "packet": packet("b")})
    assert stopped.status_code == 202, stopped.json()
    waiting = Escalation.objects.get(pk=stopped.json()["escalation"])

    attempt(formatter, "fmt", kind="environment", signature="exit-2", message="gofmt exited 2")

    assert Run.objects.get(key=RUN).state == "failed"
    waiting.refresh_from_db()
    assert (waiting.status, waiting.outcome) == ("closed", "run_failed")
    assert waiting.returned_reason == f"Closed: run {RUN} failed: fmt: gofmt exited 2"
    assert open_codes("b") == set()  # its hold is lifted: nothing waits on a person


def api(client: Any, sender: Sender, path: str) -> Any:
    _, token = ApiToken.issue(sender.agent)
    return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}").json()


@pytest.fixture
def formatter(client: Any, fleet: Fleet) -> Sender:
    """A deterministic tool registered for the coders' role."""
    return make_sender(client, fleet, "formatter", role="coding", tool=True)


@pytest.fixture
def one_task(hooked: Fleet, planner: Sender, coder: Sender) -> None:
    planner.post(
        "run.started", {"run": RUN, "tasks": [task("a"), task("after", prerequisites=["a"])]}
    )


# Transient failures: the same context after a backoff, within budgets -------------------------


def test_a_transient_failure_is_retried_with_the_same_context_after_a_backoff(
    client, one_task, coder, receiver
):
    before = timezone.now()
    attempt(coder, "a", kind="transient", signature="rate-limited", message="429 from the model")

    decision = last_decision("a")
    assert decision.action == "retry"
    assert decision.reason.startswith("Transient retry: attempt 1 failed with a transient failure")
    assert decision.acted_at is None
    config = retries.retry_config()
    assert before + timedelta(seconds=config.base_delay_s) <= decision.not_before
    assert decision.not_before <= timezone.now() + timedelta(
        seconds=config.base_delay_s * (1 + config.jitter)
    )
    [notice] = sent(receiver, "task.retry", "a")
    assert notice["not_before"] == decision.not_before.isoformat()
    assert notice["agent"] == "coder" and notice["reason"] == decision.reason
    # Not before its time: the task is failed until the retry is due.
    assert state("a") == "failed"
    early = start(coder, "a")
    assert early.status_code == 409
    [refused] = early.json()["errors"]
    assert refused["msg"] == (
        "task 'a' is failed, not pending: its attempt 1 failed (429 from the model); it is "
        f"retried not before {decision.not_before.isoformat()} (task.retry)"
    )
    context = api(client, coder, f"/api/v1/runs/{RUN}/tasks/a/context")
    assert (context["decision"], context["ground_truth"], context["scope"]) == ("retry", [], None)
    assert context["not_before"] is not None

    act_when_due(decision)

    assert state("a") == "pending"
    assert Task.objects.get(key="a").ready
    assert sent(receiver, "task.ready", "a")[-1]["agent"] == "coder"
    again = start(coder, "a")  # the same prompt and context: a retry changes nothing else
    assert again.status_code == 202
    assert Attempt.objects.get(task__key="a", number=2).reframed is False


def test_a_retry_that_is_not_due_yet_is_not_acted_on(one_task, coder, receiver):
    attempt(coder, "a", kind="transient", signature="timeout")
    decision = last_decision("a")

    committed(lambda: retries.act_on_decision(decision.pk))

    decision.refresh_from_db()
    assert decision.acted_at is None and state("a") == "failed"


def test_a_due_retry_is_acted_on_once_however_often_it_is_woken(one_task, coder, receiver):
    attempt(coder, "a", kind="transient", signature="timeout")
    decision = last_decision("a")
    readied = len(sent(receiver, "task.ready", "a"))

    act_when_due(decision)
    committed(lambda: retries.act_on_decision(decision.pk))
    committed(reconcile)

    assert len(sent(receiver, "task.ready", "a")) == readied + 1
    decision.refresh_from_db()
    assert decision.acted_at is not None


def test_the_backoff_grows_with_each_transient_failure_in_a_row(one_task, coder):
    attempt(coder, "a", kind="transient", signature="timeout")
    first = last_decision("a")
    act_when_due(first)
    attempt(coder, "a", kind="transient", signature="timeout")
    second = last_decision("a")

    config = retries.retry_config()
    assert second.not_before is not None
    assert second.not_before - second.created_at >= timedelta(seconds=2 * config.base_delay_s)
    assert "retry 2 of 3 for the task" in second.reason


def test_a_long_wait_is_never_handed_to_the_broker_as_one_countdown(
    one_task, coder, settings, monkeypatch
):
    """Redis redelivers a message held past its visibility timeout: a retry would run twice."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 7200}
    settings.RETRY_POLICY = {"base_delay_s": 3 * 3600, "max_delay_s": 3 * 3600}
    countdowns: list[float] = []
    from runs import tasks

    monkeypatch.setattr(
        tasks.act_on_decision,
        "apply_async",
        lambda args, countdown: countdowns.append(countdown),
    )

    attempt(coder, "a", kind="transient", signature="timeout")

    assert countdowns == [3600]
    decision = last_decision("a")
    assert decision.not_before is not None
    assert decision.not_before > timezone.now() + timedelta(hours=2)
    # The reconciler wakes it once it is due, and not before.
    monkeypatch.undo()
    committed(reconcile)
    assert state("a") == "failed"
    Decision.objects.filter(pk=decision.pk).update(not_before=timezone.now() - timedelta(minutes=1))
    committed(reconcile)
    assert state("a") == "pending"


def test_after_its_retry_budget_a_transient_failure_is_reframed(one_task, coder):
    for _ in range(3):
        attempt(coder, "a", kind="transient", signature="timeout")
        act_when_due(last_decision("a"))

    attempt(coder, "a", kind="transient", signature="timeout")

    decision = last_decision("a")
    assert decision.action == "reframe"
    assert "the task's retry budget is spent (3 of 3 used)" in decision.reason
    assert state("a") == "pending"


def test_the_fleets_retry_budget_is_shared_by_its_tasks(hooked, planner, coder):
    Fleet.objects.filter(pk=hooked.pk).update(retry_budget=1)
    planner.post("run.started", {"run": RUN, "tasks": [task("a"), task("b")]})

    attempt(coder, "a", kind="transient", signature="timeout")
    attempt(coder, "b", kind="transient", signature="timeout")

    assert last_decision("a").action == "retry"
    assert last_decision("b").action == "reframe"
    assert "the fleet's retry budget is spent (1 of 1 used)" in last_decision("b").reason


def test_repeated_transient_failures_naming_a_capability_hand_the_work_to_the_scheduler(
    client, hooked, planner, coder, receiver
):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("push", capabilities=["forge"]), task("local")]},
    )
    for _ in range(2):
        attempt(coder, "push", kind="transient", signature="forge-502", capability="forge")
        assert last_decision("push").trip_capability == ""
        act_when_due(last_decision("push"))

    attempt(coder, "push", kind="transient", signature="forge-502", capability="forge")

    tripped = last_decision("push")
    assert (tripped.action, tripped.trip_capability) == ("retry", "forge")
    assert "Circuit breaker: 3 transient failures named capability forge" in tripped.reason
    forge = Capability.objects.get(name="forge")
    assert (forge.status, forge.changed_by) == ("down", retries.BREAKER)
    assert "circuit breaker" in forge.reason
    act_when_due(tripped)
    # Due, but the scheduler holds it: only the work that needs the forge waits.
    assert state("push") == "pending"
    assert open_codes("push") == {"capability:forge"}
    assert Task.objects.get(key="local").ready
    assert sent(receiver, "task.deferred", "push")[-1]["blockers"] == ["capability:forge"]

    planner.post("capability.changed", {"capability": "forge", "status": "up", "reason": "back"})
    assert Task.objects.get(key="push").ready
    # After its budget it is not retried again: it is reframed, and waits for the forge again.
    attempt(coder, "push", kind="transient", signature="forge-502", capability="forge")
    after_budget = last_decision("push")
    assert after_budget.action == "reframe"
    assert "retry budget is spent" in after_budget.reason
    assert open_codes("push") == {"capability:forge"}


def test_failures_from_before_a_capability_came_back_do_not_trip_it_again(hooked, planner, coder):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("push", capabilities=["forge"]), task("tag", capabilities=["forge"])]},
    )  # fmt: skip
    failure = {"kind": "transient", "signature": "forge-502", "capability": "forge"}

    def fails(key: str, minute: int) -> None:
        start(coder, key)
        coder.post(
            "task.finished",
            {"run": RUN, "task": key, "outcome": "failed", "failure": failure},
            received=f"2026-12-02T10:{minute:02d}:00Z",
        )

    for minute in range(3):
        fails("push", minute)
        act_when_due(last_decision("push"))
    assert Capability.objects.get(name="forge").status == "down"
    planner.post("capability.changed", {"capability": "forge", "status": "up", "reason": "back"})

    fails("tag", 3)  # within the window of the three, but after the trip they caused

    assert (last_decision("tag").action, last_decision("tag").trip_capability) == ("retry", "")
    assert Capability.objects.get(name="forge").status == "up"


def test_transient_failures_outside_the_breakers_window_do_not_trip_it(hooked, planner, coder):
    planner.post("run.started", {"run": RUN, "tasks": [task("push", capabilities=["forge"])]})
    planner.post("capability.changed", {"capability": "forge", "status": "up", "reason": "ok"})
    for minute in (0, 11, 22):
        start(coder, "push")
        stamp = f"2026-12-02T10:{minute:02d}:00Z"
        coder.post(
            "task.finished",
            {"run": RUN, "task": "push", "outcome": "failed",
             "failure": {"kind": "transient", "signature": "502", "capability": "forge"}},
            received=stamp,
        )  # fmt: skip
        act_when_due(last_decision("push"))

    assert [d.trip_capability for d in decisions("push")] == ["", "", ""]
    assert Capability.objects.get(name="forge").status == "up"


# The signal rule, reframe, reroute, escalate -----------------------------------------------------


def test_two_differently_prompted_attempts_failing_the_same_way_are_escalated(
    client, one_task, coder, receiver
):
    attempt(coder, "a", prompt="p1", kind="spec", signature="no-tier-source")
    assert last_decision("a").action == "reframe"
    attempt(coder, "a", prompt="p2", kind="spec", signature="no-tier-source")

    decision = last_decision("a")
    assert decision.action == "escalate"
    assert decision.reason.startswith("Signal rule: attempts 1 and 2 were prompted differently")
    assert state("a") == "escalated"
    escalation = Escalation.objects.get(task__key="a")
    assert (escalation.status, escalation.reason, escalation.attempt_number) == (
        "open",
        decision.reason,
        2,
    )
    [asked] = sent(receiver, "packet.requested", "a")
    draft = asked.pop("draft")
    assert asked == {
        "escalation": escalation.pk,
        "run": RUN,
        "task": "a",
        "agent": "coder",
        "attempt": 2,
        "reason": decision.reason,
        # Bulkhead drafted tried from the attempts; no claim was checked, so no evidence.
        "missing": ["smallest_unblocking_question", "evidence"],
    }
    assert draft == escalation.packet.content and len(draft["tried"]) == 2
    [opened] = sent(receiver, "escalation.opened", "a")
    assert opened["escalation"] == escalation.pk and opened["question"] is None
    assert opened["drafted"] is True
    assert start(coder, "a", prompt="p3").status_code == 409


def test_the_same_prompt_after_a_reframe_is_refused_not_another_vote(
    one_task, coder, coder2, receiver
):
    # The same prompt and context again would be another vote, not agreement (test_policy);
    # after a reframe the start gate refuses it, so the policy never counts it as reframed.
    attempt(coder, "a", kind="reasoning", signature="off-by-one")
    reframe = last_decision("a")
    assert reframe.action == "reframe"

    again = start(coder, "a")
    assert again.status_code == 409
    assert f"decision {reframe.pk} (reframe)" in json.dumps(again.json())
    assert not Attempt.objects.filter(task__key="a", number=2).exists()
    assert last_decision("a") == reframe
    assert sent(receiver, "packet.requested") == []


def test_a_reasoning_failure_is_reframed_then_rerouted_then_escalated(
    client, one_task, coder, coder2, receiver
):
    attempt(coder, "a", prompt="p1", signature="wrong-total", message="the total is off by tax")
    reframe = last_decision("a")
    assert reframe.action == "reframe"
    assert (
        "Work only on the part that failed (wrong-total: the total is off by tax)" in reframe.scope
    )
    [told] = sent(receiver, "task.reframed", "a")
    assert told["scope"] == reframe.scope and told["ground_truth"] == []
    context = api(client, coder, f"/api/v1/runs/{RUN}/tasks/a/context")
    assert (context["decision"], context["scope"]) == ("reframe", reframe.scope)

    attempt(coder, "a", prompt="p2", signature="wrong-rounding")
    assert Attempt.objects.get(task__key="a", number=2).reframed
    reroute = last_decision("a")
    assert (reroute.action, reroute.reroute_to) == ("reroute", "coder-2")
    assert Task.objects.get(key="a").agent.name == "coder-2"
    [moved] = sent(receiver, "task.rerouted", "a")
    assert (moved["from"], moved["to"], moved["tool"]) == ("coder", "coder-2", False)
    context = api(client, coder, f"/api/v1/runs/{RUN}/tasks/a/context")
    assert context["agent"] == "coder-2"
    assert context["scope"] == reframe.scope  # the new agent is told what the old one learnt

    attempt(coder2, "a", prompt="p3", signature="wrong-currency")
    assert Attempt.objects.get(task__key="a", number=3).rerouted
    escalate = last_decision("a")
    assert escalate.action == "escalate"
    assert "it was reframed (attempt 2) and rerouted (attempt 3)" in escalate.reason
    assert [d.action for d in decisions("a")] == ["reframe", "reroute", "escalate"]
    assert sent(receiver, "packet.requested", "a")[0]["agent"] == "coder-2"


def test_with_no_other_agent_of_the_role_the_task_goes_to_a_registered_tool(
    one_task, coder, formatter, receiver
):
    attempt(coder, "a", prompt="p1", signature="lint")
    attempt(coder, "a", prompt="p2", signature="lint-again")

    decision = last_decision("a")
    assert (decision.action, decision.reroute_to) == ("reroute", "tool:formatter")
    assert "the deterministic tool formatter" in decision.reason
    assert Task.objects.get(key="a").agent == formatter.agent
    assert sent(receiver, "task.rerouted", "a")[0]["tool"] is True


def test_a_task_rerouted_to_a_tool_that_fails_too_is_escalated_not_the_end_of_the_run(
    one_task, coder, formatter, receiver
):
    attempt(coder, "a", prompt="p1", signature="lint")
    attempt(coder, "a", prompt="p2", signature="lint-again")
    assert last_decision("a").reroute_to == "tool:formatter"
    attempt(formatter, "a", prompt="p3", kind="environment", signature="exit-2")

    decision = last_decision("a")
    assert [d.action for d in decisions("a")] == ["reframe", "reroute", "escalate"]
    assert Task.objects.get(key="a").state == "escalated"
    assert Run.objects.get(key=RUN).state == "running"
    assert sent(receiver, "packet.requested", "a")[0]["agent"] == "formatter"
    assert "rerouted" in decision.reason


def test_with_nobody_to_reroute_to_a_reframed_failure_is_escalated(one_task, coder):
    attempt(coder, "a", prompt="p1", signature="s1")
    attempt(coder, "a", prompt="p2", signature="s2")

    decision = last_decision("a")
    assert decision.action == "escalate"
    assert "there is no other agent of the role and no deterministic tool" in decision.reason


def test_a_packet_that_came_with_the_failure_is_not_asked_for_again(
    one_task, coder, receiver, monkeypatch
):
    attempt(coder, "a", prompt="p1", kind="spec", signature="no-tier-source")
    held: list[int] = []
    monkeypatch.setattr(retries, "after_attempt", held.append)  # the worker is slow today
    attempt(coder, "a", prompt="p2", kind="spec", signature="no-tier-source")
    packet = {
        "task": "a",
        "tried": ["the plan's column", "the live schema"],
        "ruled_out": [],
        "evidence": [
            {
                "kind": "file_read",
                "source": "config/pricing-config.yaml:12-14",
                "payload_hash": "sha256:" + "0" * 64,
            }
        ],
        "smallest_unblocking_question": "Where does a customer's tier come from?",
    }
    submitted = coder.post("packet.submitted", {"run": RUN, "task": "a", "packet": packet})
    assert submitted.status_code == 202, submitted.json()
    monkeypatch.undo()

    committed(lambda: retries.after_attempt(held[0]))

    decision = last_decision("a")
    assert decision.action == "escalate"
    assert "handed over a failure packet" in decision.reason
    assert Escalation.objects.filter(task__key="a").count() == 1
    assert sent(receiver, "packet.requested") == []
    assert len(sent(receiver, "escalation.opened", "a")) == 1


def test_a_failure_of_a_task_assigned_to_a_tool_fails_the_run_at_once(
    client, hooked, planner, coder, formatter, receiver
):
    planner.post("run.started", {"run": RUN, "tasks": [task("fmt", agent="formatter"), task("b")]})
    attempt(formatter, "fmt", kind="environment", signature="exit-2", message="gofmt exited 2")

    decision = last_decision("fmt")
    assert decision.action == "abort"
    assert "the deterministic tool formatter" in decision.reason
    run = Run.objects.get(key=RUN)
    assert (run.state, run.cause) == ("failed", "fmt: gofmt exited 2")
    assert run.finished_at is not None
    [failed] = sent(receiver, "run.failed")
    assert failed == {"run": RUN, "task": "fmt", "cause": "fmt: gofmt exited 2"}
    detail = api(client, planner, f"/api/v1/runs/{RUN}")
    assert detail["state"] == "failed" and detail["cause"] == "fmt: gofmt exited 2"
    assert detail["decisions"][-1]["cause"] == "fmt: gofmt exited 2"


def test_nothing_more_is_decided_for_a_run_that_has_failed(hooked, planner, coder, formatter):
    planner.post("run.started", {"run": RUN, "tasks": [task("fmt", agent="formatter"), task("b")]})
    start(coder, "b")
    attempt(formatter, "fmt", signature="exit-2")

    fail(coder, "b", signature="late")

    assert decisions("b") == []


# A refuted claim: the producing task is reframed with reality -------------------------------------


def refute_by_hand(key: str, note: str) -> Claim:
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get_or_create(username="alice")[0]
    claim = Claim.objects.get(key=key)
    return committed(
        lambda: claims.check_by_hand(claim=claim, reviewer=alice, verdict="refuted", note=note)
    )


def post_claim(sender: Sender, task_key: str, key: str, statement: str) -> None:
    posted = sender.post(
        "claim.posted",
        {"run": RUN, "task": task_key, "claim": {"key": key, "statement": statement}},
    )
    assert posted.status_code == 202, posted.json()


def test_a_refuted_claim_reframes_the_task_that_posted_it_with_reality(
    client, hooked, planner, coder, receiver
):
    planner.post(
        "run.started",
        {"run": RUN, "tasks": [task("plan", agent="planner"),
                               task("build", prerequisites=["plan"], consumes=["tier"])]},
    )  # fmt: skip
    start(planner, "plan")
    post_claim(planner, "plan", "tier", "customers.customer_tier exists")
    finish(planner, "plan")

    refute_by_hand("tier", "customers has no customer_tier column")

    decision = last_decision("plan")
    assert decision.action == "reframe"
    [truth] = decision.ground_truth
    assert (truth["claim"], truth["kind"], truth["source"]) == (
        "tier",
        "human_answer",
        "reviewer:alice",
    )
    assert truth["payload"] == {
        "verdict": "refuted",
        "note": "customers has no customer_tier column",
    }
    assert state("plan") == "pending"
    attempt_row = Attempt.objects.get(task__key="plan")
    assert (attempt_row.outcome, attempt_row.failure_signature) == ("failed", retries.CLAIM_REFUTED)
    [told] = sent(receiver, "task.reframed", "plan")
    assert told["ground_truth"] == decision.ground_truth
    context = api(client, planner, f"/api/v1/runs/{RUN}/tasks/plan/context")
    assert context["ground_truth"] == decision.ground_truth
    assert open_codes("build") == {"claim:tier", "prerequisite:plan"}


def test_a_finish_of_a_task_never_started_says_it_has_not_started(hooked, planner, receiver):
    planner.post("run.started", {"run": RUN, "tasks": [task("plan", agent="planner")]})
    early = planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})
    assert early.status_code == 409
    assert early.json()["errors"] == [
        {
            "loc": "data.task",
            "msg": "task 'plan' is pending, not running: it has not started: send task.started "
            "once it is ready",
        }
    ]


def test_a_finish_after_a_refutation_ended_the_attempt_is_told_why(hooked, planner, receiver):
    """The agent is still at work when its claim is refuted: its attempt fails then, and the
    finish it sends afterwards is refused saying so (before: only "is pending, not running")."""
    planner.post("run.started", {"run": RUN, "tasks": [task("plan", agent="planner")]})
    start(planner, "plan")
    post_claim(planner, "plan", "tier", "customers.customer_tier exists")
    refute_by_hand("tier", "customers has no customer_tier column")

    late = planner.post("task.finished", {"run": RUN, "task": "plan", "outcome": "succeeded"})

    assert late.status_code == 409
    [refused] = late.json()["errors"]
    assert refused["loc"] == "data.task"
    assert refused["msg"].startswith(
        "task 'plan' is pending, not running: its attempt 1 failed (claim tier (customers."
        "customer_tier exists) was refuted: "
    )
    assert refused["msg"].endswith(
        "; start its next attempt with task.started (its context says what changed)"
    )


def test_a_second_refutation_after_a_reframe_with_another_prompt_is_escalated(
    hooked, planner, coder, receiver
):
    """The seed's aside: the reframed plan needs a tier source that does not exist either."""
    planner.post(
        "run.started",
        {
            "run": RUN,
            "tasks": [task("plan", agent="planner"), task("build", prerequisites=["plan"])],
        },
    )
    start(planner, "plan", prompt="p1")
    post_claim(planner, "plan", "tier", "customers.customer_tier exists")
    finish(planner, "plan")
    refute_by_hand("tier", "no such column")
    start(planner, "plan", prompt="p2")
    post_claim(planner, "plan", "tier-source", "loyalty.tier exists")
    finish(planner, "plan")

    refute_by_hand("tier-source", "no such table")

    decision = last_decision("plan")
    assert decision.action == "escalate"
    assert decision.reason.startswith("Signal rule")
    assert sent(receiver, "packet.requested", "plan")


def test_a_refutation_replaces_a_retry_that_was_not_due_yet(hooked, planner, coder):
    planner.post("run.started", {"run": RUN, "tasks": [task("plan", agent="planner")]})
    start(planner, "plan")
    post_claim(planner, "plan", "tier", "customers.customer_tier exists")
    fail(planner, "plan", kind="transient", signature="timeout")
    retry = last_decision("plan")

    refute_by_hand("tier", "no such column")

    retry.refresh_from_db()
    assert retry.acted_at is not None  # superseded
    assert last_decision("plan").action == "reframe"
    assert retries.act_on_decision(retry.pk) is not None
    assert state("plan") == "pending"


def test_a_refutation_of_an_escalated_tasks_claim_is_left_to_the_reviewer(hooked, planner, coder):
    planner.post("run.started", {"run": RUN, "tasks": [task("plan", agent="planner")]})
    start(planner, "plan", prompt="p1")
    post_claim(planner, "plan", "tier", "customers.customer_tier exists")
    fail(planner, "plan", kind="spec", signature="s")
    start(planner, "plan", prompt="p2")
    fail(planner, "plan", kind="spec", signature="s")
    assert state("plan") == "escalated"
    count = len(decisions("plan"))

    refute_by_hand("tier", "no such column")

    assert len(decisions("plan")) == count
    assert state("plan") == "escalated"


# Lost messages: the database is the truth, the reconciler wakes what was lost ---------------------


def test_a_decision_whose_message_was_lost_is_made_by_the_reconciler(
    one_task, coder, settings, monkeypatch
):
    from runs import tasks

    monkeypatch.setattr(tasks.after_attempt, "delay", lambda attempt_id: None)  # lost
    attempt(coder, "a", kind="spec", signature="s")
    assert decisions("a") == []
    monkeypatch.undo()
    settings.RECONCILE_GRACE_SECONDS = 0

    committed(reconcile)
    committed(reconcile)

    assert [d.action for d in decisions("a")] == ["reframe"]


def test_unknown_ids_are_nothing_to_do():
    assert retries.after_attempt(10**9) is None
    assert retries.act_on_decision(10**9) is None


# The run, as the API shows it ---------------------------------------------------------------------


def test_the_run_shows_every_decision_with_its_reason(client, one_task, coder, coder2):
    attempt(coder, "a", kind="transient", signature="timeout", message="read timed out")
    act_when_due(last_decision("a"))
    attempt(coder, "a", signature="wrong", message="wrong answer")

    detail = api(client, coder, f"/api/v1/runs/{RUN}")

    rows = [(d["task"], d["attempt"], d["action"]) for d in detail["decisions"]]
    assert rows == [("a", 1, "retry"), ("a", 2, "reframe")]
    retry, reframe = detail["decisions"]
    assert retry["reason"] == decisions("a")[0].reason and retry["not_before"] is not None
    assert retry["cause"] == "a: read timed out"
    assert reframe["scope"] and reframe["acted_at"] is not None
    assert reframe["cause"] == "a: wrong answer"


def test_deliveries_carry_the_notifications_of_a_decision_in_its_transaction(one_task, coder):
    attempt(coder, "a", kind="transient", signature="timeout")

    retry = Delivery.objects.get(type="task.retry")
    assert retry.payload["data"]["not_before"] == last_decision("a").not_before.isoformat()
    assert retry.status == "delivered"


def test_after_its_budget_slow_transient_failures_hand_the_task_to_the_scheduler(
    hooked, planner, coder, receiver
):
    planner.post("run.started", {"run": RUN, "tasks": [task("push", capabilities=["forge"])]})
    for minute in (0, 11, 22, 33):  # never three within the breaker's window
        start(coder, "push")
        coder.post(
            "task.finished",
            {"run": RUN, "task": "push", "outcome": "failed",
             "failure": {"kind": "transient", "signature": "502", "capability": "forge"}},
            received=f"2026-12-02T10:{minute:02d}:00Z",
        )  # fmt: skip
        act_when_due(last_decision("push"))

    after_budget = last_decision("push")
    assert "retry budget is spent" in after_budget.reason
    assert after_budget.trip_capability == "forge"
    forge = Capability.objects.get(name="forge")
    assert (forge.status, forge.changed_by) == ("down", retries.BREAKER)
    assert "retries are spent" in forge.reason
    assert open_codes("push") == {"capability:forge"}


def test_a_transient_failure_of_a_tool_is_retried_not_the_end_of_the_run(
    hooked, planner, coder, formatter, receiver
):
    planner.post("run.started", {"run": RUN, "tasks": [task("fmt", agent="formatter"), task("b")]})
    attempt(formatter, "fmt", kind="transient", signature="forge-502", message="502 from forge")

    retry = last_decision("fmt")
    assert retry.action == "retry" and retry.not_before is not None
    assert Run.objects.get(key=RUN).state == "running"
    assert sent(receiver, "run.failed") == []
    act_when_due(retry)
    assert state("fmt") == "pending"


def test_a_tool_whose_transient_retries_are_spent_fails_the_run(
    hooked, planner, coder, formatter, receiver
):
    planner.post("run.started", {"run": RUN, "tasks": [task("fmt", agent="formatter"), task("b")]})
    for _ in range(3):
        attempt(formatter, "fmt", kind="transient", signature="timeout", message="timed out")
        assert last_decision("fmt").action == "retry"
        act_when_due(last_decision("fmt"))

    attempt(formatter, "fmt", kind="transient", signature="timeout", message="timed out")

    decision = last_decision("fmt")
    assert decision.action == "abort"
    assert "the task's retry budget is spent (3 of 3 used)" in decision.reason
    assert "deterministic tool formatter" in decision.reason
    run = Run.objects.get(key=RUN)
    assert (run.state, run.cause) == ("failed", "fmt: timed out")
    assert [f["cause"] for f in sent(receiver, "run.failed")] == ["fmt: timed out"]
