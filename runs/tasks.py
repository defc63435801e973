"""Celery tasks of the work: thin, idempotent, taking ids and calling services.

The services enqueue these after commit, and these call the services: the one import cycle,
kept inside runs/ (both sides import the other module, never a name from it).
"""

from celery import shared_task

from fleet import broker
from runs import retries, scheduler
from runs.claims import verification
from runs.models import Run


@shared_task(acks_late=True)
def recompute(
    run_id: int,
    changed: list[str] | None = None,
    capability: str | None = None,
    claims: list[str] | None = None,
    on_its_way: str = "",
) -> None:
    """Catch the run's stored frontier up with its pending changes (`changed` None: all of it).

    `on_its_way`: the mark its send left; lifted before the changes are read, so a change
    committed from now on sends a recompute of its own."""
    if on_its_way:
        broker.arrived(on_its_way)
    if Run.objects.filter(pk=run_id).exists():
        scheduler.recompute(run_id, changed, capability, claims)


@shared_task(acks_late=True)
def verify_claim(claim_id: int) -> None:
    """Re-check a claim's evidence against reality."""
    verification.verify_claim(claim_id)


@shared_task(acks_late=True)
def after_attempt(attempt_id: int) -> None:
    """Decide what happens after an attempt that failed or left killed background work."""
    retries.after_attempt(attempt_id)


@shared_task(acks_late=True)
def act_on_decision(decision_id: int) -> None:
    """Carry out a stored decision once it is due (a retry's not_before)."""
    retries.act_on_decision(decision_id)
