"""One question, one answer: a task whose packet asks what a waiting escalation of its fleet
already asks joins that escalation instead of opening its own.

The escalation's own task is `Escalation.task`; each task that joined has a `JoinedTask` row with
its own packet and the same hold (`escalation:<id>`) on it. The answer releases them all (see
`escalations.services.answer`); a reviewer splits a task off when the questions only look alike;
an escalation closed without an answer hands the tasks still waiting on it to a new one, so none
is left without a person.
"""

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from escalations.models import Escalation, FailurePacket, JoinedTask
from escalations.packets import same_question
from escalations.services import routing
from escalations.services.state import (
    hold_of,
    lock_escalation,
    open_escalation,
    refuse_unless_open,
)
from fleet import rows
from fleet.errors import Refusal
from fleet.outbox import notify
from runs import holds, scheduler, task_state
from runs.models import Run, Task


def asks_the_same(packet: FailurePacket | None, other: FailurePacket | None) -> bool:
    """Two packets ask the same question (the agent's own, never a draft's empty one)."""
    if packet is None or other is None or packet.drafted or other.drafted:
        return False
    return same_question(
        key=packet.question_key,
        dedup_key=packet.dedup_key,
        other_key=other.question_key,
        other_dedup_key=other.dedup_key,
    )


def ask_in_turn(*, fleet_id: int, question_key: str, dedup_key: str) -> None:
    """Packets that may ask the same question take turns until their transactions end, so
    the second finds the first's escalation and joins it (two agents failing on one question
    at the same moment open one escalation, not two). A lock per question and per dedup_key,
    taken in one order; on SQLite a writing transaction has the database to itself already."""
    if connection.vendor != "postgresql":
        return
    keys = sorted(
        f"{fleet_id}:{kind}:{key}"
        for kind, key in (("question", question_key), ("dedup", dedup_key))
        if key
    )
    if not keys:
        return
    locks = ", ".join(["pg_advisory_xact_lock(hashtextextended(%s, 0))"] * len(keys))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {locks}", keys)  # noqa: S608 (only placeholders spliced in)


def waiting_join(task: Task) -> JoinedTask | None:
    """The escalation the task waits on as a joined task, if any (locked)."""
    return rows.one(  # a task waits on one escalation at a time
        JoinedTask.objects.select_for_update(of=("self",))
        .select_related("escalation", "escalation__packet", "packet")
        .filter(task=task, left_at__isnull=True)
    )


def matching_escalation(
    *, task: Task, packet: FailurePacket, exclude: int | None = None
) -> Escalation | None:
    """The oldest waiting escalation of the task's fleet that asks the packet's question, locked.

    Never the task's own, one it was split off from (a reviewer said they only look alike), or
    one whose task is of another fleet. Locked and read again: an answer that came first wins,
    and the packet then opens an escalation of its own.
    """
    if packet.drafted or not (packet.question_key or packet.dedup_key):
        return None
    fleet_id = task.run.fleet_id
    split_from = JoinedTask.objects.filter(task=task, left=JoinedTask.Left.SPLIT).values(
        "escalation_id"
    )
    candidates = (
        Escalation.objects.filter(
            fleet_id=fleet_id, status__in=Escalation.OPEN_STATES, packet__drafted=False
        )
        .exclude(task=task)
        .exclude(pk__in=split_from)
        .select_related("packet")
        .order_by("opened_at", "id")
    )
    if exclude is not None:
        # Only an older one: two tasks filling their drafts at once never wait on each other.
        own = Escalation.objects.filter(pk=exclude).values_list("opened_at", flat=True).first()
        candidates = candidates.exclude(pk=exclude)
        if own is not None:
            candidates = candidates.filter(Q(opened_at__lt=own) | Q(opened_at=own, pk__lt=exclude))
    same = Q(pk__in=[])
    if packet.question_key:
        same |= Q(packet__question_key=packet.question_key)
    if packet.dedup_key:
        same |= Q(packet__dedup_key=packet.dedup_key)
    for pk in candidates.filter(same).values_list("pk", flat=True)[:20]:
        escalation = lock_escalation(pk)
        current = escalation.packet
        if (
            escalation.status in Escalation.OPEN_STATES
            and escalation.fleet_id == fleet_id
            and asks_the_same(packet, current)
        ):
            return escalation
    return None


def join(
    *, escalation: Escalation, task: Task, packet: FailurePacket | None, at: datetime
) -> JoinedTask:
    """The task waits on `escalation` from now on, with its own packet and the same hold."""
    joined = JoinedTask.objects.create(
        escalation=escalation, task=task, packet=packet, joined_at=at
    )
    holds.place(task=task, code=hold_of(escalation), at=at)
    task_state.escalated(task)
    scheduler.mark_changed(task.run, [task.key])
    return joined


def leave(joined: JoinedTask, *, left: str, note: str, at: datetime, lift: bool = True) -> None:
    """The task no longer waits on the escalation (answered, split off, moved, its run over)."""
    joined.left_at = at
    joined.left = left
    joined.note = note
    joined.save(update_fields=["left_at", "left", "note"])
    if lift:
        holds.lift(
            run=joined.task.run_id, codes=[hold_of(joined.escalation)], at=at, task=joined.task
        )


def waiting_joined(escalation: Escalation) -> list[JoinedTask]:
    """The joined tasks still waiting on the escalation, in the order they joined."""
    return list(
        JoinedTask.objects.filter(escalation=escalation, left_at__isnull=True)
        .select_related("task", "task__run", "task__run__fleet", "task__agent", "packet")
        .order_by("joined_at", "id")
    )


def hand_over(escalation: Escalation, *, why: str, at: datetime) -> Escalation | None:
    """The escalation closes without an answer for its own task: the tasks that joined it still
    wait for one, on a new escalation (the first of them opens it, the others join it)."""
    waiting = [j for j in waiting_joined(escalation) if j.task.state == Task.State.ESCALATED]
    moved: Escalation | None = None
    for joined in waiting:
        if joined.task.run.state != Run.State.RUNNING:
            leave(
                joined,
                left=JoinedTask.Left.CLOSED,
                note=f"its run has {joined.task.run.state}",
                at=at,
            )
            continue
        if moved is None:
            leave(joined, left=JoinedTask.Left.MOVED, note=why, at=at)
            moved = open_escalation(
                run=joined.task.run,
                task=joined.task,
                packet=joined.packet,
                reason=(
                    f"it waited on escalation {escalation.pk} ({escalation.task.key}) with the "
                    f"same question, and {why}"
                ),
                attempt_number=joined.task.attempts.count(),
                at=at,
            )
            routing.route_new(moved, at=at)  # routed as any new escalation: pool, due, messages
            notify_opened(moved)
        else:
            leave(
                joined,
                left=JoinedTask.Left.MOVED,
                note=f"{why}; moved to escalation {moved.pk}",
                at=at,
            )
            join(escalation=moved, task=joined.task, packet=joined.packet, at=at)
        scheduler.mark_changed(joined.task.run, [joined.task.key])
    for joined in waiting_joined(escalation):  # anything else that still waits (not escalated)
        leave(joined, left=JoinedTask.Left.CLOSED, note=why, at=at)
    return moved


def leave_run(run: Run, *, why: str, at: datetime) -> None:
    """The run is over: its tasks stop waiting on other runs' escalations."""
    for joined in JoinedTask.objects.select_related("escalation", "task").filter(
        task__run=run, left_at__isnull=True
    ):
        leave(joined, left=JoinedTask.Left.CLOSED, note=why, at=at)


def notify_opened(escalation: Escalation) -> None:
    packet = escalation.packet
    notify(
        escalation.run.fleet,
        "escalation.opened",
        {
            "escalation": escalation.pk,
            "run": escalation.run.key,
            "task": escalation.task.key,
            "question": packet.smallest_unblocking_question if packet else None,
            "reason": escalation.reason,
            "reopened": False,
            "drafted": bool(packet and packet.drafted),
        },
    )


@transaction.atomic
def escalation_split(*, escalation: Escalation, reviewer: Any, task_id: int) -> Escalation:
    """A reviewer says a joined task's question only looks like this one: it gets an escalation
    of its own, with its own packet, and never joins this one again."""
    now = timezone.now()
    row = (
        JoinedTask.objects.filter(
            escalation_id=escalation.pk, task_id=task_id, left_at__isnull=True
        )
        .select_related("task")
        .first()
    )
    if row is None:
        raise Refusal(
            "That task is not waiting on this escalation (it was split off, answered or moved).",
            status=409,
        )
    # The order everything else locks in: the run, the task, then the escalation.
    run = (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .select_related("fleet")
        .get(pk=row.task.run_id)
    )
    task = Task.objects.select_for_update(of=("self",)).select_related("agent").get(pk=task_id)
    escalation = lock_escalation(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    joined = waiting_join(task)
    if joined is None or joined.escalation_id != escalation.pk:
        raise Refusal(
            "That task is not waiting on this escalation (it was split off, answered or moved).",
            status=409,
        )
    split = open_escalation(
        run=run,
        task=task,
        packet=joined.packet,
        reason=(
            f"{reviewer.get_username()} split it off escalation {escalation.pk} "
            f"({escalation.task.key}): the questions only look alike"
        ),
        attempt_number=task.attempts.count(),
        at=now,
    )
    routing.route_new(split, at=now)
    leave(
        joined,
        left=JoinedTask.Left.SPLIT,
        note=f"split off by {reviewer.get_username()} into escalation {split.pk}",
        at=now,
    )
    notify_opened(split)
    scheduler.mark_changed(run, [task.key])
    return split
