"""Celery tasks of the desk: thin, idempotent, taking ids and calling services.

The services enqueue these after commit, and these call the services (both sides import the
other module, never a name from it).
"""

from celery import shared_task

from escalations.services import packet_checks


@shared_task(acks_late=True)
def check_packet(packet_id: int) -> None:
    """Re-check a failure packet's evidence against reality."""
    packet_checks.packet_check(packet_id)
