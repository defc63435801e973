"""After an attempt: run the retry policy, store its decision with its reason, and act on it.

`after_attempt` is the policy's caller for a finished attempt (enqueued after the commit of a
failed `task.finished`, or of one that left killed background work); `claim_refuted` is its
caller for a claim that reality refuted; `act_on_decision` carries out a retry once it is due;
`fail_run` fails a run with its full cause. Each runs in one transaction and is idempotent:
the Decision row (acted_at) is the truth, the broker's messages only wake it.
"""

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.broker import after_commit, countdown
from fleet.models import Agent, Capability
from fleet.outbox import notify
from runs import capabilities, holds, policy, scheduler, signals, task_state, tasks
from runs.models import Attempt, Claim, Decision, ProgressLine, Run, Task
from runs.retry_facts import (
    alternatives_for,
    attempt_views,
    budget_for,
    ground_truth_for,
    recent_capability_failures,
    tools_for,
)
from runs.selectors import attempt_cause, killed_records

# The signature of a task whose load-bearing claim reality refuted: two such failures of
# differently prompted attempts agree (the signal rule), whichever claims they were.
CLAIM_REFUTED = "claim-refuted"
BREAKER = "bulkhead:circuit-breaker"


def retry_config() -> policy.RetryConfig:
    """The policy's knobs; settings.RETRY_POLICY may override any RetryConfig field."""
    return policy.RetryConfig(**getattr(settings, "RETRY_POLICY", {}))


def after_attempt(attempt_id: int) -> Decision | None:
    """Decide what happens after an attempt that failed or left killed background work.

    Nothing happens twice: an attempt that already has a decision, is no longer its task's
    latest, or belongs to a run that is over or was imported, is left as it is.
    """
    run_id = Attempt.objects.filter(pk=attempt_id).values_list("task__run_id", flat=True).first()
    if run_id is None:
        return None
    with transaction.atomic():
        run = lock_run(run_id)
        attempt = Attempt.objects.select_related("agent").get(pk=attempt_id)
        task = lock_task(attempt.task_id)
        if (
            run.state != Run.State.RUNNING
            or run.imported
            or not attempt.outcome
            or Decision.objects.filter(attempt=attempt).exists()
            or task.attempts.filter(number__gt=attempt.number).exists()
        ):
            if attempt.outcome == Attempt.Outcome.SUCCEEDED and run.state != Run.State.RUNNING:
                task_state.stand(
                    task, attempt
                )  # a run that is over resumes nothing: the outcome stands
            return None
        now = timezone.now()
        carried: Decision | None = None
        if attempt.background_killed:
            views = attempt_views(task)
            background = policy.after_background_kill(task=task.key, attempts=views)
            if background.action == "resume":
                # A failure the attempt reported waits for the Resume's own outcome.
                decision = record(
                    run, task, attempt, now, action="resume", reason=background.reason
                )
                carry_out(decision, run, task, attempt, now)
                return decision
            if background.action == "carry_on":
                ProgressLine.objects.create(
                    run=run,
                    task=task,
                    text=background.progress_line or "",
                    killed=list(background.killed),
                    created_at=now,
                )
                carried = record(
                    run, task, attempt, now, action="carry_on", reason=background.reason
                )
        if attempt.outcome != Attempt.Outcome.FAILED:
            task_state.stand(task, attempt)  # the outcome stands: it succeeded
            scheduler.mark_changed(run, [task.key])
            return carried
        return decide_failure(run, task, attempt, now)


def claim_refuted(*, claim: Claim, reality: list[dict[str, Any]]) -> Decision | None:
    """A refuted claim is a loud failure of the task that posted it: hand it to the retry policy.

    Called inside the verifying transaction. The task's latest attempt fails (whatever it
    reported), with `reality` as ground truth, so the policy reframes it rather than running it
    again on the same context. A task already with a person (escalated) or cancelled is left to
    them: the refutation is on the claim, and its reality stays in the task's ground truth.
    """
    with transaction.atomic():
        run = lock_run(claim.run_id)
        task = lock_task(claim.task_id)
        if run.state != Run.State.RUNNING or task.state in (
            Task.State.ESCALATED,
            Task.State.CANCELLED,
        ):
            return None
        attempt = task.attempts.select_related("agent").order_by("-number").first()
        if attempt is None:
            return None
        now = timezone.now()
        failure = policy.Failure(
            kind="reasoning",
            signature=CLAIM_REFUTED,
            message=f"claim {claim.key} ({claim.statement}) was refuted: {claim.status_reason}",
        )
        override = None
        if attempt.outcome == Attempt.Outcome.FAILED:
            override = failure  # it had failed already: this failure is the one decided on now
        else:
            attempt.outcome = Attempt.Outcome.FAILED
            attempt.failure_kind = failure.kind
            attempt.failure_signature = failure.signature
            attempt.failure_message = failure.message
            attempt.failure_capability = ""
            attempt.finished_at = attempt.finished_at or now
            attempt.save()
            task_state.failed(task)
        return decide_failure(run, task, attempt, now, reality=reality, override=override)


def act_on_decision(decision_id: int) -> Decision | None:
    """Carry out a stored decision once it is due: a retry puts its task back to pending.

    Run any number of times, early or late: one that is not due yet does nothing (its message
    or the reconciler brings it back), one already acted on does nothing.
    """
    head = Decision.objects.filter(pk=decision_id).values_list("run_id", "task_id").first()
    if head is None:
        return None
    with transaction.atomic():
        run = lock_run(head[0])
        task = lock_task(head[1])
        decision = Decision.objects.select_for_update().get(pk=decision_id)
        now = timezone.now()
        if decision.acted_at is not None or (decision.not_before and decision.not_before > now):
            return decision
        decision.acted_at = now
        decision.save(update_fields=["acted_at"])
        if (
            decision.action == Decision.Action.RETRY
            and run.state == Run.State.RUNNING
            and task.state == Task.State.FAILED
        ):
            task_state.back_to_pending(task)
            scheduler.mark_changed(run, [task.key])
        return decision


def lock_run(run_id: int) -> Run:
    # The run first, then the task: the order every service of the work locks in. NO KEY
    # UPDATE, as the recompute takes it: events that insert rows referencing the run or the
    # task (their FOR KEY SHARE) neither wait for this nor deadlock with it.
    return (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .select_related("fleet")
        .get(pk=run_id)
    )


def lock_task(task_id: int) -> Task:
    return (
        Task.objects.select_for_update(of=("self",), no_key=True)
        .select_related("agent")
        .get(pk=task_id)
    )


def decide_failure(
    run: Run,
    task: Task,
    attempt: Attempt,
    now: datetime,
    *,
    reality: Sequence[Mapping[str, Any]] = (),
    override: policy.Failure | None = None,
) -> Decision:
    """The policy's decision on the task's failed latest attempt, stored and acted on."""
    killed = killed_records(run)
    after = any(work for _, work in killed)
    own = (
        attempt_cause(task.key, attempt, after_killed_work=after)
        if override is None
        else (override.message if after else f"{task.key}: {override.message}")
    )
    cause = policy.failure_cause(killed=killed, cause=own)
    # A later failure names the killed work ahead of its own cause, here and in run.failed.
    named = f"{cause}. " if killed else ""
    tool = deterministic_tool(task, attempt)
    if tool is not None and (override is not None or attempt.failure_kind != "transient"):
        decision = record(
            run,
            task,
            attempt,
            now,
            action="abort",
            reason=named
            + f"Fail the run: {task.key} is assigned to the deterministic tool {tool.name}, "
            "and a deterministic step fails the same way again, so it is neither retried, "
            "reframed nor rerouted; nothing is left for the policy to change.",
        )
    elif task.state == Task.State.ESCALATED:
        return with_a_person(run, task, attempt, now, named=named)
    else:
        decision = ask_the_policy(
            run, task, attempt, now, reality=reality, override=override, tool=tool, named=named
        )
    if decision.action == Decision.Action.ABORT:
        fail_run(run, task, cause=cause, now=now)
        scheduler.mark_changed(run, [task.key])
    return decision


def deterministic_tool(task: Task, attempt: Attempt) -> Agent | None:
    """The tool the task is assigned to, unless it was rerouted there (rule 5: then escalate)."""
    tool = task.agent if task.agent.is_tool else attempt.agent if attempt.agent.is_tool else None
    if (
        tool is not None
        and Decision.objects.filter(task=task, action=Decision.Action.REROUTE).exists()
    ):
        return None
    return tool


def with_a_person(run: Run, task: Task, attempt: Attempt, now: datetime, *, named: str) -> Decision:
    """The agent stopped and handed over a packet after its failure: a person has it now."""
    hold = holds.first_hold(task)
    which = f" ({hold.replace(':', ' ')})" if hold else ""
    return record(
        run,
        task,
        attempt,
        now,
        action="escalate",
        reason=named
        + f"Escalate: attempt {attempt.number} failed and the agent handed over a failure "
        f"packet{which}; the task waits for a person.",
    )


def ask_the_policy(
    run: Run,
    task: Task,
    attempt: Attempt,
    now: datetime,
    *,
    reality: Sequence[Mapping[str, Any]],
    override: policy.Failure | None,
    tool: Agent | None,
    named: str,
) -> Decision:
    """The retry policy decides on the attempts' history and the facts; carried out at once."""
    config = retry_config()
    views = attempt_views(task)
    if override is not None:
        views[-1] = replace(views[-1], outcome="failed", failure=override)
    breaker = recent_capability_failures(run, attempt, config) if override is None else 0
    result = policy.decide(
        attempts=views,
        ground_truth=ground_truth_for(task, reality),
        budget=budget_for(run, task, now),
        config=config,
        alternatives=alternatives_for(task),
        tools=tools_for(task),
        recent_capability_failures=breaker,
        now=now,
        rng=random.Random(),
        tool=tool.name if tool is not None else None,
    )
    decision = record(
        run, task, attempt, now, action=result.action, reason=named + result.reason, result=result
    )
    carry_out(decision, run, task, attempt, now, breaker=breaker)
    return decision


def record(
    run: Run,
    task: Task,
    attempt: Attempt | None,
    now: datetime,
    *,
    action: str,
    reason: str,
    result: policy.Decision | None = None,
) -> Decision:
    """Store a decision; a retry waits for its not_before, anything else is acted on now."""
    # A newer decision replaces the task's earlier ones not acted on yet (a retry not yet due).
    Decision.objects.filter(task=task, acted_at__isnull=True).update(acted_at=now)
    waits = action == Decision.Action.RETRY
    return Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=action,
        reason=reason,
        not_before=result.not_before if result else None,
        ground_truth=[dict(item) for item in result.ground_truth] if result else [],
        scope=(result.scope or "") if result else "",
        reroute_to=(result.reroute_to or "") if result else "",
        trip_capability=(result.trip_capability or "") if result else "",
        created_at=now,
        acted_at=None if waits else now,
    )


def carry_out(
    decision: Decision,
    run: Run,
    task: Task,
    attempt: Attempt,
    now: datetime,
    *,
    breaker: int = 0,
) -> None:
    """Act on a decision just stored, in its transaction; notifications go out after commit."""
    fleet = run.fleet
    base = {"run": run.key, "task": task.key, "attempt": attempt.number, "reason": decision.reason}
    if decision.trip_capability:
        trip(decision, run, task, breaker, now)
    action = decision.action
    if action == Decision.Action.RETRY:
        assert decision.not_before is not None
        notify(
            fleet,
            "task.retry",
            {**base, "agent": task.agent.name, "not_before": decision.not_before.isoformat()},
        )
        schedule(decision, now)
    elif action == Decision.Action.RESUME:
        task_state.back_to_pending(task)
        notify(
            fleet,
            "task.resume",
            {**base, "agent": task.agent.name, "killed": list(attempt.background_killed)},
        )
        scheduler.mark_changed(run, [task.key])
    elif action == Decision.Action.REFRAME:
        task_state.back_to_pending(task)
        notify(
            fleet,
            "task.reframed",
            {
                **base,
                "agent": task.agent.name,
                "ground_truth": decision.ground_truth,
                "scope": decision.scope,
            },
        )
        scheduler.mark_changed(run, [task.key])
    elif action == Decision.Action.REROUTE:
        target = reroute_target(run, decision.reroute_to)
        was = task.agent.name
        task_state.back_to_pending(task, agent=target)
        notify(
            fleet,
            "task.rerouted",
            {**base, "from": was, "to": target.name, "agent": target.name, "tool": target.is_tool},
        )
        scheduler.mark_changed(run, [task.key])
    elif action == Decision.Action.ESCALATE:
        escalate(decision, run, task, attempt, now)


def schedule(decision: Decision, now: datetime) -> None:
    """Wake the retry at its not_before; a wait the broker cannot hold is left to the reconciler."""
    assert decision.not_before is not None
    wait = (decision.not_before - now).total_seconds()
    delay = countdown(wait)
    decision_id = decision.pk
    after_commit(tasks.act_on_decision, decision_id, countdown=delay)


def reroute_target(run: Run, target: str) -> Agent:
    return Agent.objects.get(fleet_id=run.fleet_id, name=target.removeprefix(policy.TOOL))


def trip(decision: Decision, run: Run, task: Task, failures: int, now: datetime) -> None:
    """The circuit breaker: mark the capability down for the fleet; the scheduler holds its work."""
    config = retry_config()
    why = (
        f"{failures} transient failures named it within {config.breaker_window_s:.0f}s "
        f"(threshold {config.breaker_threshold})"
        if failures >= config.breaker_threshold
        else "a task's retries are spent on transient failures naming it"
    )
    capabilities.capability_change(
        fleet=run.fleet,
        name=decision.trip_capability,
        status=Capability.Status.DOWN,
        reason=f"circuit breaker: {why}; tripped by {run.key}/{task.key}"[:500],
        role=None,
        by=BREAKER,
        at=now,
    )


def escalate(decision: Decision, run: Run, task: Task, attempt: Attempt, now: datetime) -> None:
    """The task goes to a person: the desk opens the escalation and asks for a packet."""
    signals.escalation_needed.send(sender=Decision, decision=decision, attempt=attempt)
    task_state.escalated(task)
    scheduler.mark_changed(run, [task.key])


def fail_run(run: Run, task: Task, *, cause: str, now: datetime) -> None:
    """The run has failed: its cause, with the killed background work named ahead, and run.failed."""
    full = policy.failure_cause(killed=killed_records(run), cause=cause)
    failed = Run.objects.filter(pk=run.pk, state=Run.State.RUNNING).update(
        state=Run.State.FAILED, cause=full, finished_at=now
    )
    if failed:
        run.state, run.cause, run.finished_at = Run.State.FAILED, full, now
        notify(run.fleet, "run.failed", {"run": run.key, "task": task.key, "cause": full})
        signals.run_failed.send(sender=Run, run=run, cause=full, at=now)
