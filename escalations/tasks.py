"""Celery tasks of the desk: thin, idempotent, taking ids and calling services.

The services enqueue these after commit, and these call the services (both sides import the
other module, never a name from it).
"""

from datetime import datetime

from celery import shared_task

from escalations.services import messages, packet_checks, routing


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
