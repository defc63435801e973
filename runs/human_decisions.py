"""What a person decides on a task, carried out in the work: an answer reframes it, a reroute
hands it over, an abort cancels it and what waits on it. The desk calls each once, in its
transaction, with the hold (`escalation:<id>`) the decision lifts."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from fleet.models import Agent
from fleet.outbox import notify
from runs import frontier, holds, policy, release, scheduler, task_state
from runs.claims.by_hand import answered, supersede_refuted
from runs.claims.hashing import HUMAN_ANSWER
from runs.context import next_attempt
from runs.models import Attempt, Decision, ProgressLine, Run, Task


@dataclass(frozen=True)
class Reframed:
    decision: Decision
    released: list[str]  # the tasks the answer made ready, the answered task first
    blockers: list[str]  # what the reframed task still waits on, if anything


@dataclass(frozen=True)
class Aborted:
    decision: Decision
    cancelled: list[str]  # the work waiting on the task, cancelled with it


def latest_attempt(task: Task) -> Attempt | None:
    return task.attempts.order_by("-number").first()


def settle_decisions(task: Task, now: datetime) -> None:
    # A person's decision replaces any earlier one still waiting (a retry not yet due).
    Decision.objects.filter(task=task, acted_at__isnull=True).update(acted_at=now)


def answer_reframe(
    *,
    run: Run,
    task: Task,
    hold: str,
    escalation: int,
    reviewer: str,
    question: str,
    answer: str,
    at: datetime,
    claim_key: str = "",
) -> Reframed:
    """A reviewer's answer: a verified claim, ground truth for a reframed next attempt.

    The answer replaces the task's refuted claims that others consume, the hold is lifted, and
    `task.reframed` goes out (after commit) with the whole next-attempt context.
    """
    who = f"reviewer:{reviewer}"
    payload = {"question": question, "answer": answer, "escalation": escalation}
    evidence = answered(
        run_id=run.pk,
        task=task,
        key=claim_key or f"answer.escalation-{escalation}",
        statement=f"{question} — {answer}",
        reason=f"verified: answered by {reviewer}, a reviewer",
        who=who,
        payload=payload,
        at=at,
    )
    truth = {
        "kind": HUMAN_ANSWER,
        "source": who,
        "question": question,
        "answer": answer,
        "claim": evidence.claim.key,
        "escalation": escalation,
        "payload_hash": evidence.payload_hash,
    }
    attempt = latest_attempt(task)
    settle_decisions(task, at)
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.REFRAME,
        reason=(
            f"Reframe: {reviewer} answered escalation {escalation} "
            f"({question}): {answer}. The next attempt gets the answer as ground truth."
        ),
        ground_truth=[truth],
        created_at=at,
        acted_at=at,
    )
    task_state.back_to_pending(task)
    holds.lift(run=run, codes=[hold], at=at, task=task)
    # The answer is the truth the task's refuted claims lacked: it takes their place.
    supersede_refuted(
        task=task,
        statement=answer,
        evidence={"source": who, "payload_hash": evidence.payload_hash, "payload": payload},
        at=at,
    )
    nodes, world = scheduler.nodes_for(run), scheduler.world_for(run)
    released = release.released_by(nodes, world, task.key)
    blockers = list(frontier.frontier(nodes, world).deferred.get(task.key, ()))
    notify_reframed(run, task, attempt, decision, escalation)
    scheduler.mark_changed(run, released)
    return Reframed(decision=decision, released=released, blockers=blockers)


def notify_reframed(
    run: Run, task: Task, attempt: Attempt | None, decision: Decision, escalation: int
) -> None:
    """`task.reframed`, with the whole context of the next attempt (all its ground truth)."""
    context = next_attempt(task)
    notify(
        run.fleet,
        "task.reframed",
        {
            "run": run.key,
            "task": task.key,
            "agent": task.agent.name,
            "attempt": attempt.number if attempt else 0,
            "reason": decision.reason,
            "ground_truth": context["ground_truth"],
            "scope": context["scope"],
            "escalation": escalation,
        },
    )


def person_reroute(
    *, run: Run, task: Task, hold: str, escalation: int, to: Agent, reason: str, at: datetime
) -> Decision:
    """Hand the task to another agent of the fleet (or a tool); its next attempt keeps the context."""
    was = task.agent.name
    attempt = latest_attempt(task)
    settle_decisions(task, at)
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.REROUTE,
        reason=reason,
        reroute_to=to.name,
        created_at=at,
        acted_at=at,
    )
    task_state.back_to_pending(task, agent=to)
    holds.lift(run=run, codes=[hold], at=at, task=task)
    notify(
        run.fleet,
        "task.rerouted",
        {
            "run": run.key,
            "task": task.key,
            "attempt": attempt.number if attempt else 0,
            "from": was,
            "to": to.name,
            "agent": to.name,
            "tool": to.is_tool,
            "reason": decision.reason,
            "escalation": escalation,
        },
    )
    scheduler.mark_changed(run, [task.key])
    return decision


def waiting_on(run: Run, task: Task) -> list[str]:
    """The unfinished work downstream of the task that an abort cancels (not what is running)."""
    nodes = scheduler.nodes_for(run)
    waiting = [
        k for k in release.downstream(nodes, task.key) if nodes[k].state in frontier.UNFINISHED
    ]
    return sorted(
        Task.objects.filter(run=run, key__in=waiting)
        .exclude(state=Task.State.RUNNING)
        .values_list("key", flat=True)
    )


def person_abort(
    *,
    run: Run,
    task: Task,
    holds_to_lift: Sequence[str],
    account: str,
    by: str,
    reason: str,
    at: datetime,
) -> Aborted:
    """Stop the task for good: it and the work waiting on it are cancelled, and the run fails.

    `account` opens the decision's reason (the desk words it: who, which escalation, why); the
    run's failure cause names the task, `by` (`reviewer:<name>`) and `reason`.
    """
    cancelled = waiting_on(run, task)
    attempt = latest_attempt(task)
    settle_decisions(task, at)
    dependants = f"; {len(cancelled)} task{'s' if len(cancelled) != 1 else ''} waiting on it "
    dependants += f"cancelled ({', '.join(cancelled)})" if cancelled else "cancelled"
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.ABORT,
        reason=f"{account}{dependants}; the run fails.",
        created_at=at,
        acted_at=at,
    )
    task_state.cancel(run, [task.key, *cancelled], at)
    holds.lift(run=run, codes=holds_to_lift, at=at)
    if run.state == Run.State.RUNNING:
        killed = [
            (line.task.key if line.task else "", tuple(line.killed))
            for line in ProgressLine.objects.filter(run=run).select_related("task")
            if line.killed
        ]
        cause = policy.failure_cause(killed=killed, cause=f"{task.key}: aborted by {by}: {reason}")
        Run.objects.filter(pk=run.pk).update(state=Run.State.FAILED, cause=cause, finished_at=at)
        notify(run.fleet, "run.failed", {"run": run.key, "task": task.key, "cause": cause})
    scheduler.mark_changed(run, [task.key, *cancelled])
    return Aborted(decision=decision, cancelled=cancelled)
