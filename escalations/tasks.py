"""Celery tasks of the desk: thin, idempotent, taking ids and calling services.

The services enqueue these after commit, and these call the services (both sides import the
other module, never a name from it).
"""

from datetime import datetime

from celery import shared_task

from escalations.services import messages, packet_checks, routing
from fleet import deliveries
from runs import scheduler
from runs.models import Run


@shared_task(acks_late=True)
def answered(delivery_ids: list[int], run_ids: list[int]) -> None:
    """What an answer sends once committed, in one message and this order: its notifications
    (`task.reframed` first, the agent waits for it), then its runs' frontiers caught up (what
    the answer released is told with `task.ready`). Nothing of the recompute competes with the
    agent's notification. A message lost is found again: the deliveries and the frontier
    changes are in the database, and the reconciler enqueues them."""
    for delivery_id in delivery_ids:
        deliveries.send(delivery_id)
    for run_id in run_ids:
        if Run.objects.filter(pk=run_id).exists():
            scheduler.recompute(run_id, [], None, None)


@shared_task(acks_late=True)
def check_packet(packet_id: int) -> None:
    """Re-check a failure packet's evidence against reality."""
    packet_checks.packet_check(packet_id)


@shared_task(acks_late=True)
def send_message(message_id: int) -> str:
    """Send one email or chat message about an escalation (retried with backoff)."""
    return messages.send(message_id)


@shared_task(acks_late=True)
def sweep_due(now: str | None = None) -> dict[str, int]:
    """The beat's due-time sweep: reminders at half time, the next tier when overdue.

    `now` (ISO 8601) stands in for the clock, for a test or a replay; the beat sends none."""
    return routing.sweep(datetime.fromisoformat(now) if now else None)
