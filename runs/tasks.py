"""Celery tasks of the work: thin, idempotent, taking ids and calling services."""

from celery import shared_task


@shared_task(acks_late=True)
def recompute(run_id: int, changed: list[str] | None = None, capability: str | None = None) -> None:
    from runs import scheduler
    from runs.models import Run

    if Run.objects.filter(pk=run_id).exists():
        scheduler.recompute(run_id, changed, capability)


@shared_task(acks_late=True)
def verify_claim(claim_id: int) -> None:
    """Re-check a claim's evidence against reality."""
    from runs.claims import verification

    verification.verify_claim(claim_id)


@shared_task(acks_late=True)
def after_attempt(attempt_id: int) -> None:
    """Decide what happens after an attempt that failed or left killed background work."""
    from runs import retries

    retries.after_attempt(attempt_id)


@shared_task(acks_late=True)
def act_on_decision(decision_id: int) -> None:
    """Carry out a stored decision once it is due (a retry's not_before)."""
    from runs import retries

    retries.act_on_decision(decision_id)
