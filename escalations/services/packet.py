"""Failure packets in: an agent stops and hands one over, or the retry policy escalates and asks."""

from datetime import datetime
from typing import Any

from escalations.models import Escalation, FailurePacket
from escalations.packets import Packet, validate_packet
from escalations.services.state import open_escalation, reopen
from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent
from fleet.outbox import notify
from runs import scheduler, task_state
from runs.models import Attempt, Decision, Task
from runs.ownership import refuse_unless_own, run_for, task_for


def checked_packet(packet: object, task: object) -> tuple[Packet | None, list[ErrorItem]]:
    """The packet if it is good, else every error, each naming its field (and a wrong task)."""
    checked = validate_packet(packet, loc="data.packet")
    if isinstance(checked, list):
        return None, [error(e.loc, e.msg) for e in checked]
    if isinstance(task, str) and checked.task != task:
        return None, [error("data.packet.task", f"names task {checked.task!r}, not {task!r}")]
    return checked, []


def packet_errors(packet: object, task: object) -> list[ErrorItem]:
    return checked_packet(packet, task)[1]


def packet_submit(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    packet: dict[str, Any],
    sender: Agent | None = None,
) -> dict[str, Any]:
    """A packet is how an agent stops: it opens (or fills) the task's escalation."""
    try:
        found = run_for(actor.fleet_id, run)
        row = task_for(found, task)
    except Refusal as exc:
        raise Refusal(exc.errors + packet_errors(packet, task), exc.status) from None
    refuse_unless_own(task=row, actor=actor, sender=sender)
    checked, errors = checked_packet(packet, row.key)
    if checked is None:
        raise Refusal(errors)
    if row.state in (Task.State.SUCCEEDED, Task.State.CANCELLED):
        raise Refusal(
            [error("data.task", f"task {row.key!r} is {row.state}; nothing to escalate")], 409
        )
    escalation, action = escalation_for_packet(row)
    if (
        escalation is not None
        and escalation.packet is not None
        and escalation.packet.content == packet
        and action == "replaced"
    ):
        # The agent sent the same packet again (a retry): nothing changes.
        return {
            "run": found.key,
            "task": row.key,
            "escalation": escalation.pk,
            "packet": "unchanged",
        }
    stored = FailurePacket.objects.create(
        task=row,
        agent=actor,
        content=packet,
        smallest_unblocking_question=checked.smallest_unblocking_question,
        submitted_at=at,
    )
    if escalation is None:
        escalation = open_escalation(
            run=found,
            task=row,
            packet=stored,
            reason="the agent stopped and handed over a failure packet",
            attempt_number=Attempt.objects.filter(task=row).count(),
            at=at,
        )
    elif action == "reopened":
        # Its earlier packets and the return's note stay in the task's history.
        reopen(escalation, stored, at)
    else:
        escalation.packet = stored  # the packet it had (if any) stays in the task's history
        escalation.save(update_fields=["packet"])
    task_state.escalated(row)
    if action in ("opened", "reopened"):
        notify_opened(escalation, checked, reopened=action == "reopened")
    scheduler.mark_changed(found, [row.key])
    return {"run": found.key, "task": row.key, "escalation": escalation.pk, "packet": action}


def notify_opened(escalation: Escalation, packet: Packet, *, reopened: bool) -> None:
    notify(
        escalation.run.fleet,
        "escalation.opened",
        {
            "escalation": escalation.pk,
            "run": escalation.run.key,
            "task": escalation.task.key,
            "question": packet.smallest_unblocking_question,
            "reopened": reopened,
        },
    )


def escalation_for_packet(task: Task) -> tuple[Escalation | None, str]:
    """The escalation a packet for `task` goes to, and what the packet does to it.

    A task has at most one waiting escalation: a packet fills (after the retry policy escalated)
    or replaces the packet of the open or claimed one, reopens the one a reviewer returned for a
    better packet, and opens a new one only when the task has neither.
    """
    escalations = Escalation.objects.select_for_update(of=("self",)).select_related("packet")
    waiting = (
        escalations.filter(task=task, status__in=Escalation.OPEN_STATES).order_by("id").first()
    )
    if waiting is not None:
        return waiting, "replaced" if waiting.packet_id else "filled"
    latest = escalations.filter(task=task).order_by("-id").first()
    if latest is not None and latest.status == Escalation.Status.RETURNED:
        return latest, "reopened"
    return None, "opened"


def open_for_decision(*, decision: Decision, attempt: Attempt, **_: Any) -> Escalation:
    """The retry policy escalated: open the task's escalation (or find the open one), and ask
    its agent for a packet unless one came with this attempt. Runs in the deciding transaction."""
    run, task = decision.run, decision.task
    packet = (
        FailurePacket.objects.filter(task=task, submitted_at__gte=attempt.started_at)
        .order_by("-submitted_at")
        .first()
    )
    escalation = (
        Escalation.objects.filter(task=task, status__in=Escalation.OPEN_STATES)
        .order_by("opened_at")
        .first()
    )
    if escalation is None:
        escalation = open_escalation(
            run=run,
            task=task,
            packet=packet,
            reason=decision.reason,
            attempt_number=attempt.number,
            at=decision.created_at,
        )
        notify(
            run.fleet,
            "escalation.opened",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "reason": decision.reason,
                "question": packet.smallest_unblocking_question if packet else None,
            },
        )
    if packet is None and escalation.packet_id is None:
        notify(
            run.fleet,
            "packet.requested",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "agent": task.agent.name,
                "attempt": attempt.number,
                "reason": decision.reason,
            },
        )
    return escalation
