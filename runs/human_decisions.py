"""What a person decides on a task, carried out in the work: an answer reframes it, a reroute
hands it over, an abort cancels it and what waits on it. The desk calls each once, in its
transaction, with the hold (`escalation:<id>`) the decision lifts."""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from fleet.models import Agent, Delivery
from fleet.outbox import notify, prepared
from fleet.together import Insert, Inserted, Update
from runs import frontier, holds, policy, release, scheduler, task_state
from runs.claims.by_hand import supersede_refuted
from runs.claims.hashing import HUMAN_ANSWER, payload_hash
from runs.models import (
    Attempt,
    Blocker,
    Claim,
    Decision,
    Evidence,
    Hold,
    ProgressLine,
    Run,
    Task,
)


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


@dataclass
class ToReframe:
    """A task an answer reframes, its run and task locked by the caller (the tasks from
    `for_answer`); `question` is the one its own packet asked."""

    run: Run
    task: Task
    question: str


@dataclass
class AnswerWrites:
    """What an answer writes, for the caller to write with its own (`fleet.together`), and the
    notifications among them, to send after commit (`task.reframed` first)."""

    writes: list[Insert | Update]
    deliveries: list[Delivery]
    reframed: list[Reframed]  # in the order of the tasks given
    runs: list[
        int
    ]  # whose frontier to recompute after commit (`scheduler.recompute_runs_after_commit`)


def reframe_by_answer(
    *,
    tasks: Sequence[ToReframe],
    hold: str,
    escalation: int,
    reviewer: str,
    answer: str,
    at: datetime,
) -> AnswerWrites:
    """A reviewer's answer, for every task it reframes: per task, a verified claim with its
    `human_answer` evidence (ground truth for a reframed next attempt), a reframe decision (any
    decision still waiting is settled), the task pending again, its hold lifted and its
    blockers under it cleared, and `task.reframed` with the whole context of the next attempt;
    the answer replaces the task's refuted claims that others consume; per run, one frontier
    change. The writes are gathered for the caller to write with its own (`fleet.together`);
    the run's facts are read in one statement and the frontier computed as it is once the
    answer is in."""
    who = f"reviewer:{reviewer}"
    payload = {"question": "", "answer": answer, "escalation": escalation}
    runs = list({item.run.pk: item.run for item in tasks}.values())
    decided = {item.task.pk: scheduler.History() for item in tasks}
    # Only what decides the answered tasks' frontier and the work below them is read (with the
    # claims the answer's own key could take), however large the runs.
    around = [item.task.pk for item in tasks]
    claim_key = f"answer.escalation-{escalation}"
    keys = [claim_key]
    for item in tasks:
        keys += [f"{claim_key}.{item.task.key}", f"{claim_key}.task-{item.task.pk}"]
    facts = scheduler.facts_for(runs, decided=decided, around=around, keys=keys)
    refuted = [item for item in tasks if decided[item.task.pk].refuted]
    for item in refuted:  # rare: the answer takes the place of refuted claims others consume
        asked = {**payload, "question": item.question}
        supersede_refuted(
            task=item.task,
            statement=answer,
            evidence={"source": who, "payload_hash": payload_hash(asked), "payload": asked},
            at=at,
        )
    if refuted:  # the claims changed: read the facts again
        decided = {item.task.pk: scheduler.History() for item in tasks}
        facts = scheduler.facts_for(runs, decided=decided, around=around, keys=keys)
    prior = {task_id: accumulated(found.decisions) for task_id, found in decided.items()}
    writes: list[Insert | Update] = []
    decisions, deliveries, claimed = (
        [],
        [],
        {run_id: set(f[1].claims) for run_id, f in facts.items()},
    )
    for item in tasks:
        run, task = item.run, item.task
        nodes, world = facts[run.pk]
        key = claim_key
        if key in claimed[run.pk]:  # another task of the run waits on the same escalation
            key = f"{key}.{task.key}" if len(key) + len(task.key) < 200 else f"{key}.task-{task.pk}"
        claimed[run.pk].add(key)
        asked = {**payload, "question": item.question}
        claim = Claim(
            run_id=run.pk, task=task, key=key, statement=f"{item.question} — {answer}",
            load_bearing=True, status=Claim.Status.VERIFIED,
            status_reason=f"verified: answered by {reviewer}, a reviewer", posted_at=at,
            posted_by=who, checked_at=at, checked_by=who,
        )  # fmt: skip
        inserted = Insert([claim])
        evidence = Evidence(
            claim_id=Inserted(inserted),  # type: ignore[misc]  # its key, once written
            role=Evidence.Role.CHECK, kind=HUMAN_ANSWER,
            source=who, payload_hash=payload_hash(asked), payload=asked, submitted_by=who,
            verdict=Claim.Status.VERIFIED,
            verdict_reason="a reviewer's answer is itself a verified claim", created_at=at,
        )  # fmt: skip
        writes += [inserted, Insert([evidence])]
        truth = {
            "kind": HUMAN_ANSWER, "source": who, "question": item.question, "answer": answer,
            "claim": key, "escalation": escalation, "payload_hash": evidence.payload_hash,
        }  # fmt: skip
        attempt = decided[task.pk].attempt  # (id, number) of its latest
        decision = Decision(
            run=run, task=task, attempt_id=attempt[0] if attempt else None, action=Decision.Action.REFRAME,
            reason=(
                f"Reframe: {reviewer} answered escalation {escalation} "
                f"({item.question}): {sentence(answer)} The next attempt gets the answer as ground "
                "truth."
            ),
            ground_truth=[truth], created_at=at, acted_at=at,
        )  # fmt: skip
        decisions.append(decision)
        if decided[task.pk].unsettled:
            writes.append(
                Update(Decision, {"task": task, "acted_at__isnull": True}, {"acted_at": at})
            )
        # The run once the answer is in: the task pending, its hold lifted, the answer a claim.
        nodes[task.key] = replace(nodes[task.key], state=Task.State.PENDING)
        held = world.escalations.get(task.key, ())
        lifted = tuple(i for i in held if f"{scheduler.ESCALATION}{i}" != hold)
        escalations = {k: v for k, v in world.escalations.items() if k != task.key}
        if lifted:
            escalations[task.key] = lifted
        claims = {**world.claims, key: frontier.ClaimView(Claim.Status.VERIFIED, True, task.key)}
        facts[run.pk] = (nodes, replace(world, escalations=escalations, claims=claims))
        task.state, task.ready, task.finished_at = Task.State.PENDING, False, None
        known, scope = prior[task.pk]
        truths = known + ([truth] if truth not in known else [])
        reframed = prepared(
            run.fleet,
            "task.reframed",
            {
                "run": run.key,
                "task": task.key,
                "agent": task.agent.name,
                "attempt": attempt[1] if attempt else 0,
                "reason": decision.reason,
                "ground_truth": truths,
                "scope": scope,
                "escalation": escalation,
            },
        )
        if reframed is not None:
            deliveries.append(reframed)
    ids = [item.task.pk for item in tasks]
    writes += [
        Insert(decisions),
        Update(Task, {"pk__in": ids}, {"state": Task.State.PENDING, "ready": False,
                                       "finished_at": None}),
        Update(Hold, {"task_id__in": ids, "code": hold, "lifted_at__isnull": True},
               {"lifted_at": at}),
        Update(Blocker, {"task_id__in": ids, "code": hold, "cleared_at__isnull": True},
               {"cleared_at": at}),
    ]  # fmt: skip
    done: list[Reframed] = []
    changes: dict[int, tuple[Run, list[str]]] = {}
    for item, decision in zip(tasks, decisions, strict=True):
        nodes, world = facts[item.run.pk]
        result = frontier.frontier(nodes, world)
        released = release.released_by(nodes, world, item.task.key, ready=result.ready)
        changes.setdefault(item.run.pk, (item.run, []))[1].extend(released)
        blockers = list(result.deferred.get(item.task.key, ()))
        done.append(Reframed(decision=decision, released=released, blockers=blockers))
    writes.append(Insert([scheduler.change(run, keys) for run, keys in changes.values()]))
    return AnswerWrites(writes=writes, deliveries=deliveries, reframed=done, runs=list(changes))


def accumulated(decisions: list[tuple[list[Any], str]]) -> tuple[list[Any], str | None]:
    """A task's ground truth so far, from its decisions oldest first (each piece once), and the
    latest scope given (what `runs.context.next_attempt` tells its next attempt)."""
    truth: list[Any] = []
    scope = None
    for given, its_scope in decisions:
        truth += [item for item in given if item not in truth]
        scope = its_scope or scope
    return truth, scope


def sentence(text: str) -> str:
    """The reviewer's answer as a sentence in a decision's reason: ended once, not twice."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?", "…")) else f"{text}."
