"""Celery tasks of the fleet: deliveries and the reconciler that re-enqueues lost work."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone


@shared_task(acks_late=True)
def deliver(delivery_id: int) -> str:
    from fleet import deliveries

    return deliveries.send(delivery_id)


@shared_task(acks_late=True)
def reconcile() -> dict[str, int]:
    """PostgreSQL is the truth: find work whose message may have been lost and enqueue it again."""
    from fleet.models import Delivery
    from runs.models import FrontierChange
    from runs.tasks import recompute

    now = timezone.now()
    grace = now - timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    stale = FrontierChange.objects.filter(created_at__lte=grace).values_list("run_id", flat=True)
    runs = sorted(set(stale[:5000]))[:500]
    for run_id in runs:
        recompute.delay(run_id, None, None)
    due = list(
        Delivery.objects.filter(
            status=Delivery.Status.PENDING, next_attempt_at__lte=now - timedelta(seconds=30)
        ).values_list("pk", flat=True)[:500]
    )
    for delivery_id in due:
        deliver.delay(delivery_id)
    from runs import reconcile as work

    counts = work.reenqueue(now=now)
    return {"runs": len(runs), "deliveries": len(due), **counts}
