"""The reviewer's other decisions on a packet: reroute the task, return the packet, abort."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from escalations.models import Escalation, FailurePacket, JoinedTask
from escalations.services import joining
from escalations.services.state import (
    NOTE_MAX_CHARS,
    PACKET_FIELDS,
    close,
    close_all,
    hold_of,
    lock_for_action,
    refuse_unless_open,
    refuse_unless_running,
)
from fleet.errors import Refusal
from fleet.models import Agent
from fleet.outbox import notify
from runs import human_decisions
from runs.models import Decision, Run, Task

# What a failed run closes: escalations waiting for a person, and those returned to their agent
# for a better packet (its next packet would reopen one of a run that is over).
WAITING = (*Escalation.OPEN_STATES, Escalation.Status.RETURNED)


def refuse_too_long(text: str, what: str) -> None:
    """A note is kept whole or refused, never cut: the agent reads all of it."""
    if len(text) > NOTE_MAX_CHARS:
        raise Refusal(
            f"The {what} is {len(text):,} characters; it may have at most {NOTE_MAX_CHARS:,} (nothing "
            "was changed, and what you typed is still here).",
            status=422,
        )


@transaction.atomic
def escalation_reroute(*, escalation: Escalation, reviewer: Any, agent: str, note: str) -> Decision:
    """Hand the task to another agent of the fleet (or a tool); its next attempt keeps the context."""
    note = note.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    target = Agent.objects.filter(fleet_id=run.fleet_id, name=agent).first()
    if target is None:
        raise Refusal(f"Choose an agent of the fleet {run.fleet.name}.", status=422)
    if target.pk == task.agent_id:
        raise Refusal(f"{task.key} is already {target.name}'s: choose another agent.", status=422)
    if not note:
        raise Refusal("Say why it goes to another agent: the new agent reads it.", status=422)
    refuse_too_long(note, "note")
    refuse_unless_running(run, "there is nothing to reroute; abort to close it.")
    decision = human_decisions.person_reroute(
        run=run,
        task=task,
        hold=hold_of(escalation),
        escalation=escalation.pk,
        to=target,
        reason=(
            f"Reroute: {reviewer.get_username()} handed {task.key} from {task.agent.name} to "
            f"{target.name} (escalation {escalation.pk}): {note}"
        ),
        at=now,
    )
    # How it ended, as the desk says it (see outcome_of): the headline, then the reviewer's note.
    escalation.returned_reason = f"Rerouted to {target.name} by {reviewer.get_username()}\n{note}"
    escalation.outcome = Escalation.Outcome.REROUTED
    close(escalation, reviewer, Escalation.Status.CLOSED, now)
    joining.hand_over(
        escalation, why=f"{task.key} was rerouted by {reviewer.get_username()}", at=now
    )
    return decision


@transaction.atomic
def escalation_return(
    *, escalation: Escalation, reviewer: Any, field: str, note: str
) -> Escalation:
    """Send the packet back naming the field that is not good enough; the agent sends a better one."""
    note = note.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if field not in PACKET_FIELDS:
        raise Refusal("Name the packet field that is not good enough.", status=422)
    if not note:
        raise Refusal(f"Say what is missing from {field}: the agent reads it.", status=422)
    refuse_too_long(note, "note")
    escalation.returned_reason = f"{field}: {note}"
    close(escalation, reviewer, Escalation.Status.RETURNED, now)
    joining.hand_over(
        escalation,
        why=f"{reviewer.get_username()} returned {task.key}'s packet to its agent",
        at=now,
    )
    # The same packet sent back unchanged is refused, naming this note.
    if escalation.packet_id is not None:
        FailurePacket.objects.filter(pk=escalation.packet_id).update(
            returned_note=escalation.returned_reason, returned_at=now
        )
    notify(
        run.fleet,
        "packet.returned",
        {
            "escalation": escalation.pk,
            "run": run.key,
            "task": task.key,
            "agent": task.agent.name,
            "field": field,
            "reason": note,
            "by": f"reviewer:{reviewer.get_username()}",
        },
    )
    return escalation


@transaction.atomic
def escalation_abort(*, escalation: Escalation, reviewer: Any, reason: str) -> Decision:
    """Stop the task for good: it and the work waiting on it are cancelled, and the run fails.

    The run is over, so nothing else of it waits for a person: its other escalations close,
    each saying why.
    """
    reason = reason.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if not reason:
        raise Refusal(
            "Say why the task is aborted: it becomes the run's failure cause.", status=422
        )
    refuse_too_long(reason, "reason")
    user = reviewer.get_username()
    said = reason.rstrip(" .;")  # it goes on with "; ...": one stop, not ".;"
    run_fails = "the run failed" if run.state == Run.State.RUNNING else f"the run had {run.state}"
    aborted = human_decisions.person_abort(
        run=run,
        task=task,
        holds_to_lift=[hold_of(escalation)],
        account=f"Abort: {user} aborted {task.key} (escalation {escalation.pk}): {said}",
        by=f"reviewer:{user}",
        reason=reason,
        at=now,
    )
    others = Escalation.objects.filter(run=run, status__in=WAITING).exclude(pk=escalation.pk)
    closed = close_for_failed_run(
        run, others, reviewer=reviewer, why=f"failed when {user} aborted {task.key}", at=now
    )
    escalation.returned_reason = "\n".join(
        [
            f"Aborted by {user}: {said}; {run_fails}",
            f"Cancelled: {', '.join([task.key, *aborted.cancelled])}",
            *([f"Closed with it: {', '.join(closed)}"] if closed else []),
        ]
    )
    escalation.outcome = Escalation.Outcome.ABORTED
    close(escalation, reviewer, Escalation.Status.CLOSED, now)
    joining.hand_over(escalation, why=f"{user} aborted {task.key}", at=now)
    return aborted.decision


def close_for_failed_run(
    run: Run, waiting: QuerySet[Escalation], *, reviewer: Any, why: str, at: datetime
) -> list[str]:
    """The run failed: nothing of it waits for a person any more. Its waiting escalations close
    saying why (how each is named is returned), the tasks of other runs that joined them wait
    on new escalations, and its own tasks leave the escalations they joined."""
    ids = list(waiting.values_list("pk", flat=True))
    closed = close_all(waiting, reviewer, f"Closed: run {run.key} {why}", at, run)
    # Only those that tasks joined have anything to hand over (two look-ups each otherwise: a
    # run of a hundred escalations took 200 statements to abort).
    joined = JoinedTask.objects.filter(escalation_id__in=ids, left_at__isnull=True)
    with_joins = Escalation.objects.filter(pk__in=joined.values("escalation_id"))
    for other in with_joins.select_related("task", "run"):
        joining.hand_over(other, why=f"run {run.key} failed", at=at)
    joining.leave_run(run, why=f"run {run.key} {why}", at=at)
    return closed


def run_failed_by_the_policy(*, run: Run, cause: str, at: datetime, **_: Any) -> None:
    """The retry policy failed the run (`runs.signals.run_failed`): as when a reviewer aborts."""
    waiting = Escalation.objects.filter(run=run, status__in=WAITING)
    close_for_failed_run(run, waiting, reviewer=None, why=f"failed: {cause}", at=at)


UNFINISHED = (Task.State.PENDING, Task.State.RUNNING, Task.State.ESCALATED)
NAMED = 10  # unfinished tasks named in the warning; past that, counted


def abort_reach(escalation: Escalation) -> dict[str, Any]:
    """What aborting the escalation's task would do (what `escalation_abort` does): the tasks
    cancelled, and the run's other open escalations closed when the run fails."""
    cancelled = human_decisions.waiting_on(escalation.run, escalation.task)
    others = (
        Escalation.objects.filter(run=escalation.run, status__in=WAITING)
        .exclude(pk=escalation.pk)
        .order_by("opened_at", "pk")
        .values_list("task__key", flat=True)
    )
    # Tasks of the same run that joined it do not wait on an escalation of their own: their
    # run fails with it, and they stop waiting, unanswered.
    stopping = JoinedTask.objects.filter(
        escalation=escalation, left_at__isnull=True, task__run=escalation.run
    ).order_by("joined_at", "pk")
    stopping_keys = list(stopping.values_list("task__key", flat=True))
    # The rest of the run's unfinished work does not go on either: the run is over.
    left = (
        Task.objects.filter(run=escalation.run, state__in=UNFINISHED)
        .exclude(key__in=[escalation.task.key, *cancelled, *stopping_keys])
        .exclude(
            pk__in=Escalation.objects.filter(run=escalation.run, status__in=WAITING).values(
                "task_id"
            )
        )
        .order_by("position", "pk")
        .values_list("key", flat=True)
    )
    return {
        "cancelled": [escalation.task.key, *cancelled],
        "others": list(others),
        "stopping": stopping_keys,
        "left": list(left[:NAMED]),
        "left_count": left.count(),
    }
