"""Reads of the work: a run's tasks, decisions and checkpoint, and the decisions still owed."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from runs import frontier, scheduler
from runs.models import Attempt, Blocker, Decision, Halt, ProgressLine, Run, Task
from runs.policy import failure_cause


def runs_visible(fleet_ids: list[int]) -> QuerySet[Run]:
    return Run.objects.filter(fleet_id__in=fleet_ids).select_related("fleet")


def task_rows(run: Run) -> list[dict[str, Any]]:
    # Computed now, as GET .../frontier and the start gate compute them: the stored blockers
    # (the checkpoint) catch up in the worker a moment after each event.
    nodes, world = scheduler.facts_of(run)
    now = frontier.frontier(nodes, world)
    blockers = now.deferred
    ready_now = set(now.ready)
    live = run.state == Run.State.RUNNING
    halts = halts_by_task(run)
    # Plain values, not model instances: a run has up to thousands of tasks.
    found = Task.objects.filter(run=run).order_by("position").values_list(
        "pk", "key", "title", "agent__name", "state", "capabilities", "reads_state_of", "effect",
        "dependency_confidence", "transaction", "consumes", "consumes_declared", "checks",
        "started_at", "finished_at",
    )  # fmt: skip
    rows = []
    for (
        pk, key, title, agent, state, capabilities, reads_state_of, effect,
        dependency_confidence, transaction, consumes, consumes_declared, checks,
        started_at, finished_at,
    ) in found:  # fmt: skip
        codes: Sequence[str] = blockers.get(key, ())
        rows.append(
            {
                "key": key,
                "title": title,
                "agent": agent,
                "state": state,
                # Ready means it may start now: a pending task of a running run, with no blocker.
                "ready": live and key in ready_now and state == Task.State.PENDING,
                "blockers": sorted(codes)
                if live or state != Task.State.PENDING
                else [f"run:{run.state}", *sorted(codes)],
                "prerequisites": list(nodes[key].prerequisites),
                "capabilities": capabilities,
                "reads_state_of": reads_state_of,
                "effect": effect,
                "dependency_confidence": dependency_confidence,
                "transaction": transaction or None,
                "consumes": consumes,
                "consumes_declared": consumes_declared,
                "checks": checks,
                "halted": halts.get(pk, []),
                "started_at": started_at,
                "finished_at": finished_at,
            }
        )
    return rows


def halts_by_task(run: Run) -> dict[int, list[dict[str, Any]]]:
    """Each task's halts, oldest first: the claims refuted while it was running on them."""
    found: dict[int, list[dict[str, Any]]] = {}
    for halt in Halt.objects.filter(task__run=run).order_by("halted_at", "id"):
        found.setdefault(halt.task_id, []).append(
            {
                "claim": halt.key,
                "attempt": halt.attempt,
                "reason": halt.reason,
                "at": halt.halted_at,
                "settled_at": halt.settled_at,
            }
        )
    return found


def killed_records(run: Run, *, until: datetime | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """The run's carry-on records, oldest first, as (task, killed background work)."""
    lines = ProgressLine.objects.filter(run=run).select_related("task")
    if until is not None:
        lines = lines.filter(created_at__lte=until)
    return [(p.task.key if p.task else "", tuple(p.killed)) for p in lines if p.killed]


def attempt_cause(task: str, attempt: Attempt, *, after_killed_work: bool = False) -> str:
    """A failed attempt's own cause. After killed background work is named ahead of it, the
    cause is the failure's own words, as the seed writes it ("... a later step failed: no PR
    found"); alone, it says which task failed."""
    what = (
        attempt.failure_message.strip()
        or attempt.failure_signature
        or f"a {attempt.failure_kind or 'reported'} failure"
    )
    return what if after_killed_work else f"{task}: {what}"


def undecided_attempts() -> QuerySet[Attempt]:
    """Finished attempts the retry policy still owes a decision (a lost message, or one in flight).

    Only a task's latest attempt of a live, recorded (not imported) run: an attempt that failed,
    or one that succeeded with killed background work (its outcome stands only once decided).
    """
    return (
        Attempt.objects.filter(task__run__state=Run.State.RUNNING, task__run__imported=False)
        .filter(
            Q(outcome=Attempt.Outcome.FAILED)
            | (Q(outcome=Attempt.Outcome.SUCCEEDED) & ~Q(background_killed=[]))
        )
        .filter(~Exists(Decision.objects.filter(attempt=OuterRef("pk"))))
        .filter(
            ~Exists(Attempt.objects.filter(task=OuterRef("task"), number__gt=OuterRef("number")))
        )
    )


def decision_rows(run: Run) -> list[dict[str, Any]]:
    """The run's timeline: every decision with its reason, and the full cause of a failure."""
    lines = list(ProgressLine.objects.filter(run=run).select_related("task"))
    rows = []
    for d in Decision.objects.filter(run=run).select_related("task", "attempt"):
        cause = None
        if d.action == Decision.Action.ABORT and run.cause:
            cause = run.cause
        elif (
            d.attempt is not None
            and d.attempt.outcome == Attempt.Outcome.FAILED
            and d.action not in (Decision.Action.RESUME, Decision.Action.CARRY_ON)
        ):
            killed = [
                (p.task.key if p.task else "", tuple(p.killed))
                for p in lines
                if p.killed and p.created_at <= d.created_at
            ]
            own = attempt_cause(d.task.key, d.attempt, after_killed_work=any(w for _, w in killed))
            cause = failure_cause(killed=killed, cause=own)
        rows.append(
            {
                "id": d.pk,
                "task": d.task.key,
                "attempt": d.attempt.number if d.attempt else None,
                "action": d.action,
                "reason": d.reason,
                "cause": cause,
                "not_before": d.not_before,
                "ground_truth": d.ground_truth,
                "scope": d.scope or None,
                "reroute_to": d.reroute_to or None,
                "trip_capability": d.trip_capability or None,
                "at": d.created_at,
                "acted_at": d.acted_at,
            }
        )
    return rows


CHECKPOINT_ROWS = 200


def checkpoint_rows(run: Run, limit: int = CHECKPOINT_ROWS) -> list[dict[str, Any]]:
    """The run's blockers other than prerequisites, newest first, with when each was set and
    cleared: what a capability's outage deferred, and when it was released."""
    blockers = (
        Blocker.objects.filter(task__run=run)
        .exclude(code__startswith="prerequisite:")
        .select_related("task")
        .order_by("-set_at", "-id")[:limit]
    )
    return [
        {"task": b.task.key, "blocker": b.code, "set_at": b.set_at, "cleared_at": b.cleared_at}
        for b in blockers
    ]
