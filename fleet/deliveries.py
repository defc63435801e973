"""Sends one outbound notification, signed, and records what the receiver said."""

import json
import random
import time
from datetime import timedelta

import httpx
from django.db import transaction
from django.utils import timezone

from fleet import signing
from fleet.models import Delivery, DeliveryAttempt

MAX_ATTEMPTS = 12
BASE_DELAY_S = 5.0
MAX_DELAY_S = 3600.0
THROTTLED = {429, 502, 503, 504}


def backoff(attempts: int, rng: random.Random | None = None) -> float:
    rng = rng or random.Random()
    delay = min(MAX_DELAY_S, BASE_DELAY_S * 2 ** max(0, attempts - 1))
    return delay * (0.5 + rng.random() / 2)


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def send(delivery_id: int, *, timeout: float = 10.0) -> str:
    """Attempt one delivery if it is due; returns its status afterwards."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True)
            .select_related("fleet")
            .filter(pk=delivery_id, status=Delivery.Status.PENDING)
            .first()
        )
        if delivery is None:
            return "skipped"
        if delivery.next_attempt_at > timezone.now():
            return "not due"
        fleet = delivery.fleet
        if not fleet.callback_url or fleet.callback_disabled_at:
            delivery.status = Delivery.Status.DISABLED
            delivery.save(update_fields=["status"])
            return delivery.status
        body = json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()
        headers = signing.sign(
            fleet.callback_secret, msg_id=delivery.webhook_id, timestamp=int(time.time()), body=body
        )
        headers["content-type"] = "application/json"
        started = time.monotonic()
        status_code: int | None = None
        error = ""
        response: httpx.Response | None = None
        try:
            response = httpx.post(
                fleet.callback_url, content=body, headers=headers, timeout=timeout
            )
            status_code = response.status_code
        except httpx.HTTPError as exc:
            error = f"{exc.__class__.__name__}: {exc}"[:500]
        duration = int((time.monotonic() - started) * 1000)
        delivery.attempts += 1
        delivery.last_status_code = status_code
        delivery.last_error = error
        DeliveryAttempt.objects.create(
            delivery=delivery, status_code=status_code, error=error, duration_ms=duration
        )
        now = timezone.now()
        if status_code is not None and 200 <= status_code < 300:
            delivery.status = Delivery.Status.DELIVERED
            delivery.delivered_at = now
        elif status_code == 410:
            delivery.status = Delivery.Status.DISABLED
            fleet.callback_disabled_at = now
            fleet.callback_disabled_reason = (
                f"the receiver answered 410 Gone to {delivery.webhook_id}"
            )
            fleet.save(update_fields=["callback_disabled_at", "callback_disabled_reason"])
        elif delivery.attempts >= MAX_ATTEMPTS:
            delivery.status = Delivery.Status.FAILED
        else:
            wait = backoff(delivery.attempts)
            if response is not None and status_code in THROTTLED:
                wait = max(wait, retry_after(response) or 0.0)
            delivery.next_attempt_at = now + timedelta(seconds=wait)
        delivery.save()
        if delivery.status == Delivery.Status.PENDING:
            from fleet.tasks import deliver

            delay = (delivery.next_attempt_at - now).total_seconds()
            transaction.on_commit(lambda: deliver.apply_async((delivery_id,), countdown=delay))
        return delivery.status
