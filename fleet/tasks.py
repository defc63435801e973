"""Celery tasks of the fleet: deliveries and the reconciler that re-enqueues lost work."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

# Redis hands a delayed message to a worker at once and redelivers it if it is not acknowledged
# within the visibility timeout; a countdown past that would run twice. Longer waits are kept
# in the database (a retry's not_before, a delivery's next_attempt_at) and picked up there.
DEFAULT_VISIBILITY_TIMEOUT_S = 3600


def countdown(seconds: float) -> float:
    """A countdown the broker will not redeliver early: at most half the visibility timeout."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    visibility = float(options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT_S))
    return max(0.0, min(seconds, visibility / 2))


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
    # Due for a while and still pending: its message was lost, or its worker died mid-request
    # (then its lease, next_attempt_at, has run out).
    due = list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=grace)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )
    for delivery_id in due:
        deliver.delay(delivery_id)
    from runs import reconcile as work

    counts = work.reenqueue(now=now)
    return {"runs": len(runs), "deliveries": len(due), **counts}
