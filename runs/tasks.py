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
    """Re-check a claim's evidence against reality (the claims issue)."""


@shared_task(acks_late=True)
def after_failure(attempt_id: int) -> None:
    """Decide what happens after a failed attempt (the retry policy issue)."""
