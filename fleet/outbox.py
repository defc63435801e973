"""Outbound notifications: written to the outbox in the caller's transaction, sent after commit."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


# While held, notifications are recorded but not sent at once: the reconciler sends what is due
# (the demo loads its stories before the web server that receives them is up).
_held: ContextVar[bool] = ContextVar("outbox_sending_held", default=False)


@contextmanager
def sending_held() -> Iterator[None]:
    token = _held.set(True)
    try:
        yield
    finally:
        _held.reset(token)


def held() -> bool:
    """Whether notifications are recorded without being sent (`sending_held`)."""
    return _held.get()


def notify(
    fleet: Fleet, type: str, data: dict[str, Any], *, at: datetime | None = None
) -> Delivery | None:
    """Record a notification for the fleet's callback; nothing to record without one."""
    delivery = prepared(fleet, type, data, at=at)
    if delivery is None:
        return None
    delivery.save(force_insert=True)
    send_after_commit([delivery])
    return delivery


def prepared(
    fleet: Fleet, type: str, data: dict[str, Any], *, at: datetime | None = None
) -> Delivery | None:
    """The notification `notify` records, unsaved: for a caller that writes it with its other
    writes (then `send_after_commit`)."""
    assert type in EVENT_TYPES, type
    if not fleet.callback_url or fleet.callback_disabled_at:
        return None
    now = timezone.now()
    return Delivery(
        fleet=fleet,
        webhook_id=f"msg_{uuid.uuid4().hex}",
        type=type,
        payload={"type": type, "timestamp": (at or now).isoformat(), "data": data},
        next_attempt_at=now,
        created_at=now,  # set here: a caller may write it with raw SQL, without the defaults
    )


def sent(delivery_id: int) -> None:
    """Send a notification its caller wrote itself (from `prepared`), after commit."""
    if not _held.get():
        after_commit(tasks.deliver, delivery_id)


def send_after_commit(deliveries: list[Delivery]) -> None:
    """The saved deliveries are sent once the transaction commits, by one worker in this order:
    one message, the first of them the first thing it does (a retry goes on its own)."""
    if _held.get() or not deliveries:
        return
    if len(deliveries) == 1:
        after_commit(tasks.deliver, deliveries[0].pk)
    else:
        after_commit(tasks.deliver_all, [d.pk for d in deliveries])
