"""Celery tasks of the fleet: deliveries, and the reconciler that re-enqueues lost work."""

from datetime import timedelta
from typing import Any, cast

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet import deliveries
from fleet.models import Delivery
from fleet.signals import reconciling


@shared_task(acks_late=True)
def deliver(delivery_id: int) -> str:
    return deliveries.send(delivery_id)


@shared_task(acks_late=True)
def deliver_all(delivery_ids: list[int]) -> list[str]:
    """Several deliveries one after the other, in the order given (one message for all)."""
    return [deliveries.send(delivery_id) for delivery_id in delivery_ids]


@shared_task(acks_late=True)
def reconcile() -> dict[str, int]:
    """PostgreSQL is the truth: find work whose message may have been lost and enqueue it again.

    The deliveries here; the work's own (frontiers, verifications, decisions) from each app that
    listens to `reconciling`.
    """
    now = timezone.now()
    grace = now - timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    # Due for a while and still pending: its message was lost, or its worker died mid-request
    # (then its lease, next_attempt_at, has run out).
    due = list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=grace)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )
    for delivery_id in due:
        deliver.delay(delivery_id)
    counts: dict[str, Any] = {"deliveries": len(due)}
    for _, found in reconciling.send(sender=Delivery, now=now):
        counts.update(cast(dict[str, int], found))
    return counts
