"""Writes of the human desk: packets in, escalations opened."""

from typing import Any

from escalations.models import Escalation, FailurePacket
from escalations.packets import validate_packet
from fleet.events import Invalid, PacketSubmitted, error
from fleet.intake import Context
from fleet.outbox import notify
from runs import scheduler
from runs.models import Attempt, Task
from runs.services import run_for, task_for


def packet_submit(context: Context, data: PacketSubmitted) -> dict[str, Any]:
    """A packet is how an agent stops: it opens (or fills) the task's escalation."""
    run = run_for(context, data.run)
    task = task_for(run, data.task)
    checked = validate_packet(data.packet, loc="data.packet")
    if isinstance(checked, list):
        raise Invalid([error(e.loc, e.msg) for e in checked])
    if checked.task != task.key:
        raise Invalid([error("data.packet.task", f"names task {checked.task!r}, not {task.key!r}")])
    if task.state in (Task.State.SUCCEEDED, Task.State.CANCELLED):
        raise Invalid(
            [error("data.task", f"task {task.key!r} is {task.state}; nothing to escalate")], 409
        )
    packet = FailurePacket.objects.create(
        task=task,
        agent=context.actor,
        content=data.packet,
        smallest_unblocking_question=checked.smallest_unblocking_question,
        submitted_at=context.at,
    )
    escalation = (
        Escalation.objects.select_for_update()
        .filter(task=task, status__in=Escalation.OPEN_STATES, packet__isnull=True)
        .order_by("opened_at")
        .first()
    )
    attempts = Attempt.objects.filter(task=task).count()
    opened = escalation is None
    if escalation is None:
        escalation = Escalation.objects.create(
            fleet_id=run.fleet_id,
            run=run,
            task=task,
            packet=packet,
            reason="the agent stopped and handed over a failure packet",
            attempt_number=attempts,
            opened_at=context.at,
        )
    else:
        escalation.packet = packet
        escalation.save(update_fields=["packet"])
    task.state = Task.State.ESCALATED
    task.ready = False
    task.save(update_fields=["state", "ready"])
    if opened:
        notify(
            context.sender.fleet,
            "escalation.opened",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "question": checked.smallest_unblocking_question,
            },
        )
    scheduler.mark_changed(run, [task.key])
    return {"run": run.key, "task": task.key, "escalation": escalation.pk}
