"""Every change of a task's state: started and finished by its agent, and each decision's move.

pending → running (task.started) → succeeded | failed (task.finished); failed → pending (a retry,
a reframe, a reroute, a resume); → escalated (a person has it) → pending (answered, rerouted);
→ cancelled (aborted). Nothing else writes `Task.state`.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import BooleanField, CharField, IntegerField, Q

from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent
from fleet.outbox import notify
from runs import intake_sql, scheduler
from runs.claims import consumers
from runs.models import (
    Artifact,
    Attempt,
    Blocker,
    Claim,
    Decision,
    Halt,
    ProgressLine,
    Run,
    Task,
)
from runs.ownership import fact, refuse_unless_own, run_and_task
from runs.specs import Outcome
from runs.start_gate import (
    STOP,
    capability_blocker_errors,
    ignored_decision,
    refresh_errors,
    refuse_ignored,
)


def task_start(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    prompt_hash: str,
    context_hash: str,
    consumes: Sequence[str] = (),
    refreshed: Sequence[str] = (),
    sender: Agent | None = None,
    imported: bool = False,
) -> dict[str, Any]:
    """The gate: an attempt starts only if its task is pending and in the safe ready frontier,
    does what the decision before it said (a reframe changes the prompt or the context, a reroute
    changes the agent), and re-read the state of every capability that came back (`refresh`)."""
    row = run_and_task(
        actor.fleet_id,
        run,
        task,
        attempts_made=fact(
            "(SELECT MAX(a.number) FROM runs_attempt a WHERE a.task_id = {task})", IntegerField()
        ),
        frontier_stale=fact(
            "EXISTS(SELECT 1 FROM runs_frontierchange f WHERE f.run_id = {run} AND f.may_hold)",
            BooleanField(),
        ),
        run_has_claims=fact(
            "EXISTS(SELECT 1 FROM runs_claim c WHERE c.run_id = {run})", BooleanField()
        ),
    )
    found = row.run
    number = (getattr(row, "attempts_made", None) or 0) + 1
    decision = None if imported else scheduler.decision_before(row, number)
    if decision is not None and (sender or actor).is_orchestrator:
        # An orchestrator may act for any agent: naming another than the reroute chose ignores
        # the decision, which is what it is told (a plain agent is told the task is not its own).
        refuse_ignored(row, number, ignored_decision(row, number, decision, actor=actor))
    refuse_unless_own(task=row, actor=actor, sender=sender, imported=imported)
    if row.state != Task.State.PENDING:
        raise Refusal(
            [error("data.task", f"task {row.key!r} is {row.state}, not pending{where_it_is(row)}")],
            status=409,
        )
    if not imported:
        refuse_unless_startable(found, row, consumes)
        refuse_ignored(
            row,
            number,
            ignored_decision(row, number, decision, actor=actor, hashes=(prompt_hash, context_hash))
            + refresh_errors(row, refreshed),
        )
    attempt = Attempt.objects.create(
        task=row,
        number=number,
        agent=actor,
        prompt_hash=prompt_hash,
        context_hash=context_hash,
        started_at=at,
        refreshed=list(dict.fromkeys(refreshed)),
        **scheduler.attempt_flags(row, number),
    )
    row.state = Task.State.RUNNING
    row.ready = False
    row.started_at = row.started_at or at
    row.refresh = []  # re-read, as its start said
    consuming = bool(consumes) or getattr(row, "run_has_claims", True)
    if consuming and connection.vendor == "postgresql":
        # The task's row and the claims it consumes in one statement.
        intake_sql.started_consuming(task=row, extra=list(consumes), at=at, imported=imported)
    else:
        row.save(update_fields=["state", "ready", "started_at", "refresh"])
        if consuming:
            consumers.started_on(row, consumes, at, imported=imported)
    scheduler.mark_changed(found, [row.key], may_hold=False)  # a start holds nothing back
    return {"run": found.key, "task": row.key, "attempt": attempt.number}


def refuse_unless_startable(run: Run, task: Task, consumes: Sequence[str]) -> None:
    if run.state != Run.State.RUNNING:
        # A run that is over starts nothing more: its frontier is empty whatever the tasks allow.
        raise Refusal(
            [error("data.run", f"run {run.key!r} has {run.state}; it starts nothing more")]
            + [error("blockers", f"run:{run.state}")],
            status=409,
        )
    if task.ready and not consumes and not getattr(task, "frontier_stale", True):
        # The stored frontier holds the task ready, and nothing since its last recompute can
        # have held it back (starts, successes, running tasks' claims only release): the rule
        # would say the same. Anything else is asked of the rule.
        return
    blockers = scheduler.blockers_of(run, task, extra_consumes=consumes)
    if blockers:
        raise Refusal(
            [error("data.task", f"task {task.key!r} is not in the safe ready frontier")]
            + [error("blockers", b) for b in blockers]
            + claim_blocker_errors(run, blockers, task=task)
            + capability_blocker_errors(run, task, blockers),
            status=409,
        )


# Capabilities that came back: the work that reads their state re-reads it before it starts.

REFRESHING = (Task.State.PENDING, Task.State.FAILED, Task.State.ESCALATED)


def refresh_needed(*, fleet_id: int, capability: str) -> int:
    """`capability` came back: every task of the fleet's running runs that reads its state and
    has yet to start (again) must acknowledge it with `refreshed` on its next task.started."""
    waiting = Task.objects.filter(
        run__fleet_id=fleet_id, run__state=Run.State.RUNNING, state__in=REFRESHING
    )
    if connection.vendor == "postgresql":  # jsonb containment, filtered in the database
        waiting = waiting.filter(reads_state_of__contains=[capability])
    rows = [
        (pk, refresh)
        for pk, reads, refresh in waiting.values_list("pk", "reads_state_of", "refresh")
        if capability in reads and capability not in refresh
    ]
    fresh = [pk for pk, refresh in rows if not refresh]
    # The state again in the update: a task that started meanwhile has read the state.
    Task.objects.filter(pk__in=fresh, state__in=REFRESHING).update(refresh=[capability])
    for pk, refresh in rows:
        if refresh:
            Task.objects.filter(pk=pk, state__in=REFRESHING).update(refresh=[*refresh, capability])
    # A task the frontier still holds ready (the outage came and went between two recomputes,
    # so it never left `ready`) is told now; one that was deferred is told by the recompute
    # that releases it.
    for task in Task.objects.filter(
        pk__in=[pk for pk, _ in rows], state=Task.State.PENDING, ready=True
    ).select_related("run__fleet", "agent"):
        notify(
            task.run.fleet,
            "task.ready",
            {
                "run": task.run.key,
                "task": task.key,
                "agent": task.agent.name,
                "refresh": task.refresh,
            },
        )
    return len(rows)


def claim_blocker_errors(
    run: Run, blockers: Sequence[str], *, task: Task | None = None
) -> list[ErrorItem]:
    """Why each `claim:<key>` blocks: unverified (and why), refuted, or never posted; and, when
    the task or a prerequisite was running on it when it was refuted, that it is held for that."""
    keys = [b.removeprefix("claim:") for b in blockers if b.startswith("claim:")]
    found = {
        c.key: c
        for c in Claim.objects.filter(run=run, key__in=keys).only("key", "status", "status_reason")
    }
    held: dict[str, list[str]] = {}
    if task is not None and keys:
        for key, holder in Halt.objects.filter(
            Q(task=task) | Q(task__dependant_links__task=task),
            key__in=keys,
            settled_at__isnull=True,
        ).values_list("key", "task__key"):
            held.setdefault(key, []).append(holder)
    errors = []
    for key in keys:
        claim = found.get(key)
        if claim is None:
            msg = f"{key} has not been posted in run {run.key!r}"
        elif claim.status == Claim.Status.REFUTED:
            msg = (
                f"{key} is refuted: {claim.status_reason}"
                if claim.status_reason
                else f"{key} is refuted"
            )
        else:
            why = f": {claim.status_reason}" if claim.status_reason else ""
            msg = f"{key} is {claim.status}, and a task starts only on verified claims{why}"
        if key in held:
            msg += (
                f"; {', '.join(sorted(set(held[key])))} was running on it when it was refuted, "
                f"so what it produced releases nothing until {key} is verified again or a "
                "reviewer's answer replaces it"
            )
        errors.append(error(f"claims.{key}", msg))
    return errors


def task_finish(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    outcome: Outcome,
    sender: Agent | None = None,
    imported: bool = False,
) -> dict[str, Any]:
    """The attempt's outcome, its artifacts; the retry policy is asked after commit if needed."""
    latest = "(SELECT a.{} FROM runs_attempt a WHERE a.task_id = {{task}} ORDER BY a.number DESC LIMIT 1)"
    row = run_and_task(
        actor.fleet_id,
        run,
        task,
        latest_attempt=fact(latest.format("id"), IntegerField()),
        latest_number=fact(latest.format("number"), IntegerField()),
        latest_outcome=fact(latest.format("outcome"), CharField()),
    )
    found = row.run
    refuse_unless_own(task=row, actor=actor, sender=sender, imported=imported)
    attempt = finishing_attempt(row, actor, at, imported=imported)
    attempt.finished_at = at
    attempt.outcome = outcome.outcome
    attempt.background_killed = list(outcome.background_killed)
    attempt.resumable = outcome.resumable
    if outcome.failure is not None:
        attempt.failure_kind = outcome.failure.kind
        attempt.failure_signature = outcome.failure.signature
        attempt.failure_message = outcome.failure.message
        attempt.failure_capability = outcome.failure.capability or ""
    attempt.save(update_fields=FINISHED_FIELDS)
    Artifact.objects.bulk_create(
        [
            Artifact(task=row, kind=a.kind, ref=a.ref, url=a.url or "", created_at=at)
            for a in outcome.artifacts
        ]
    )
    if outcome.outcome == "failed":
        row.state = Task.State.FAILED
    elif outcome.background_killed and not imported:
        # It may be resumed: its success stands, and releases what follows, once the policy says.
        row.state = Task.State.RUNNING
    else:
        row.state = Task.State.SUCCEEDED
    row.ready = False  # an imported finish may come without a start
    row.finished_at = at if row.state != Task.State.RUNNING else None
    row.save(update_fields=["state", "ready", "finished_at"])
    scheduler.after_finish(found, row, attempt, imported=imported)
    return {"run": found.key, "task": row.key, "state": row.state}


def where_it_is(task: Task) -> str:
    """For a refusal: what ended the task's latest attempt, and what comes next (read only
    when refusing). A refuted claim, say, ends an attempt while its agent is still at work."""
    attempt = (
        Attempt.objects.filter(task_id=task.pk)
        .order_by("-number")
        .values("number", "outcome", "failure_message")
        .first()
    )
    said = []
    waits = (Task.State.PENDING, Task.State.FAILED, Task.State.ESCALATED)
    if attempt is not None and attempt["outcome"] and task.state in waits:
        message = attempt["failure_message"]
        if len(message) > 300:
            message = message[:299] + "…"
        said.append(
            f"its attempt {attempt['number']} {attempt['outcome']}"
            + (f" ({message})" if message else "")
        )
    if task.state == Task.State.PENDING and attempt is None:
        said.append("it has not started: send task.started once it is ready")
    elif task.state == Task.State.PENDING:
        said.append("start its next attempt with task.started (its context says what changed)")
    elif task.state == Task.State.FAILED:
        retry = (
            Decision.objects.filter(task_id=task.pk, acted_at__isnull=True)
            .exclude(not_before=None)
            .order_by("-created_at")
            .values_list("not_before", flat=True)
            .first()
        )
        said.append(
            f"it is retried not before {retry.isoformat()} (task.retry)"
            if retry is not None
            else "the retry policy decides what follows"
        )
    elif task.state == Task.State.ESCALATED:
        said.append("it waits for a reviewer's answer")
    elif task.state == Task.State.RUNNING:
        said = [f"attempt {attempt['number']} is running"] if attempt else []
    return ": " + "; ".join(said) if said else ""


FINISHED_FIELDS = [
    "finished_at", "outcome", "background_killed", "resumable",
    "failure_kind", "failure_signature", "failure_message", "failure_capability",
]  # fmt: skip


def finishing_attempt(task: Any, actor: Agent, at: datetime, *, imported: bool) -> Attempt:
    """The running attempt a finish ends (an import may finish a task it never started): the
    task's latest, read with it (`latest_attempt`, `latest_number`, `latest_outcome`)."""
    if task.state != Task.State.RUNNING and not imported:
        raise Refusal(
            [
                error(
                    "data.task",
                    f"task {task.key!r} is {task.state}, not running{where_it_is(task)}",
                )
            ],
            409,
        )
    if task.latest_attempt is not None and task.latest_outcome and not imported:
        # It finished and waits for the policy's word on the background work it left running.
        raise Refusal(
            [error("data.task", f"task {task.key!r} attempt {task.latest_number} has finished")],
            409,
        )
    if task.latest_attempt is not None:
        # Only the finish's own fields are written (FINISHED_FIELDS): the rest stays as stored.
        attempt = Attempt(
            pk=task.latest_attempt,
            task=task,
            number=task.latest_number,
            outcome=task.latest_outcome,
        )
        attempt._state.adding = False
        return attempt
    if not imported:
        raise Refusal([error("data.task", f"task {task.key!r} has no attempt")], 409)
    return Attempt.objects.create(
        task=task, number=1, agent=actor, prompt_hash="", context_hash="", started_at=at
    )


# The decisions' moves: the retry policy, the desk and the reviewers change state only here.


def escalated(task: Task, *, saved: bool = False) -> None:
    """A person has the task now (a packet came, or the policy escalated). `saved`: its row
    was written already, with the packet's (`escalations.intake_sql`)."""
    task.state = Task.State.ESCALATED
    task.ready = False
    if not saved:
        task.save(update_fields=["state", "ready"])


def back_to_pending(task: Task, *, agent: Agent | None = None) -> None:
    """Its next attempt may start once the frontier allows: a retry, reframe, resume, reroute."""
    if agent is not None:
        task.agent = agent
    task.state = Task.State.PENDING
    task.ready = False
    task.finished_at = None
    task.save(update_fields=["state", "ready", "finished_at", "agent"])


def failed(task: Task) -> None:
    task.state = Task.State.FAILED
    task.save(update_fields=["state"])


def stand(task: Task, attempt: Attempt) -> None:
    """A succeeded attempt that left killed background work, not resumed: the task succeeded."""
    if task.state == Task.State.RUNNING:
        task.state = Task.State.SUCCEEDED
        task.finished_at = attempt.finished_at
        task.save(update_fields=["state", "finished_at"])


def cancel(run: Run, keys: Sequence[str], at: datetime) -> None:
    """Cancelled for good: they wait on nothing any more."""
    Task.objects.filter(run=run, key__in=list(keys)).update(
        state=Task.State.CANCELLED, ready=False, finished_at=at
    )
    Blocker.objects.filter(task__run=run, task__key__in=list(keys), cleared_at__isnull=True).update(
        cleared_at=at
    )


def release_stop(*, task: Task, by: str, at: datetime) -> Task:
    """Let a task's external effect go ahead although its dependencies are uncertain.

    Who and when are kept as a progress line of the run; the frontier is recomputed after commit,
    which clears the blocker. The caller holds the run's lock.
    """
    run = task.run
    task = Task.objects.select_for_update(of=("self",)).get(pk=task.pk)
    task.run = run
    if task.released:
        raise Refusal(f"{task.key}'s uncertain-dependency stop was released already.", status=409)
    if task.effect != Task.Effect.EXTERNAL or not (
        task.dependency_confidence == Task.Confidence.UNCERTAIN
        or STOP in scheduler.blockers_of(run, task)  # the fleet's unnamed roles hold it
    ):
        raise Refusal(f"{task.key} has no uncertain-dependency stop to release.", status=409)
    if task.state != Task.State.PENDING:
        raise Refusal(
            f"{task.key} is {task.state}: only a pending task waits at a stop.", status=409
        )
    task.released = True
    task.save(update_fields=["released"])
    ProgressLine.objects.create(
        run=task.run,
        task=task,
        text=f"{task.key}: {by} released its uncertain-dependency stop; its external effect may go ahead",
        created_at=at,
    )
    scheduler.mark_changed(task.run, [task.key])
    return task
