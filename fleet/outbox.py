"""Outbound notifications: written to the outbox in the caller's transaction, sent after commit."""

import uuid
from datetime import datetime
from typing import Any

from django.utils import timezone

from fleet import tasks
from fleet.broker import after_commit
from fleet.models import Delivery, Fleet

EVENT_TYPES = (
    "task.ready",
    "task.deferred",
    "task.reframed",
    "task.rerouted",
    "task.resume",
    "task.retry",
    "task.halted",
    "packet.requested",
    "packet.returned",
    "escalation.opened",
    "escalation.answered",
    "run.succeeded",
    "run.failed",
)


def notify(
    fleet: Fleet, type: str, data: dict[str, Any], *, at: datetime | None = None
) -> Delivery | None:
    """Record a notification for the fleet's callback; nothing to record without one."""
    assert type in EVENT_TYPES, type
    if not fleet.callback_url or fleet.callback_disabled_at:
        return None
    now = timezone.now()
    delivery = Delivery.objects.create(
        fleet=fleet,
        webhook_id=f"msg_{uuid.uuid4().hex}",
        type=type,
        payload={"type": type, "timestamp": (at or now).isoformat(), "data": data},
        next_attempt_at=now,
    )
    after_commit(tasks.deliver, delivery.pk)
    return delivery
