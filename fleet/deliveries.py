"""Sends one outbound notification, signed, and records what the receiver said.

A delivery is sent at least once and always under its own webhook-id, so a receiver that
dedupes on it sees each notification once. The send is leased, not locked: the row is claimed
in one short transaction (on PostgreSQL one statement; next_attempt_at moves past the
request's timeout), the request runs outside any transaction, and its result is written in
another. A worker that dies in the middle
leaves the delivery due again once the lease runs out, and the reconciler sends it.

A try ends within the timeout whatever the receiver does: the whole exchange (connecting,
sending, and reading the answer) has that deadline, so a receiver that answers a byte at a time
cannot hold a worker past it, nor past the lease.
"""

import json
import os
import random
import re
import ssl
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpcore
import httpx
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from fleet import signing, tasks
from fleet.broker import after_commit, countdown
from fleet.models import Delivery, DeliveryAttempt

BASE_DELAY_S = 5.0
MAX_DELAY_S = 3600.0
# A receiver may be down this long and still get everything; past it a delivery is failed.
RETRY_WINDOW_S = 3 * 24 * 3600.0
TIMEOUT_S = 10.0
THROTTLED = {429, 502, 503, 504}
USER_AGENT = "Bulkhead-Webhooks/1"
# Of an answer's body only the start is kept (200 characters of an error): no more is read.
BODY_READ_BYTES = 4096
ERROR_CHARS = 200


@dataclass(frozen=True)
class Response:
    status_code: int | None  # None: no answer (refused, timed out, reset)
    error: str
    retry_after: float | None
    duration_ms: int


def timeout_s() -> float:
    return float(getattr(settings, "DELIVERY_TIMEOUT_SECONDS", TIMEOUT_S))


def retry_window_s() -> float:
    return float(getattr(settings, "DELIVERY_RETRY_WINDOW_SECONDS", RETRY_WINDOW_S))


def lease_s(timeout: float) -> float:
    """How long a claimed send keeps others off: a try ends within `timeout`, and the slack
    covers a slow database around it.

    `DELIVERY_LEASE_SECONDS` shortens or lengthens the slack, never below 3 × `timeout`."""
    configured = float(getattr(settings, "DELIVERY_LEASE_SECONDS", 0) or 0)
    if configured:
        return max(configured, 3 * timeout)
    return 3 * timeout + 30


def backoff(attempts: int, rng: random.Random | None = None, *, cap: float = MAX_DELAY_S) -> float:
    """Exponential backoff with jitter: the wait before the next try, after `attempts` tries."""
    rng = rng or random.Random()
    delay = min(cap, BASE_DELAY_S * 2 ** min(max(0, attempts - 1), 32))
    return delay * (0.5 + rng.random() / 2)


def retry_after(headers: httpx.Headers, now: datetime) -> float | None:
    """Seconds the receiver asked us to wait (delta-seconds or an HTTP date), if it said."""
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


# The lease of a delivery that is due, in one statement (committed on its own): the first thing
# a worker does for a notification is to send it, with no transaction around a lock first.
LEASE_SQL = """
UPDATE fleet_delivery d SET attempts = d.attempts + 1, next_attempt_at = %(lease)s
  FROM fleet_fleet f
 WHERE d.id = (SELECT id FROM fleet_delivery WHERE id = %(id)s AND status = %(pending)s
                  AND next_attempt_at <= %(now)s FOR UPDATE SKIP LOCKED)
   AND f.id = d.fleet_id AND f.callback_url <> '' AND f.callback_disabled_at IS NULL
RETURNING d.attempts, f.callback_url, f.callback_secret, d.webhook_id, d.payload
"""


def leased(delivery_id: int, timeout: float) -> tuple[int, str, str, str, object] | None:
    """On PostgreSQL, the common case at once: a pending delivery that is due, not being sent
    and whose fleet has a callback is leased (its try counted); None for anything else."""
    if connection.vendor != "postgresql":
        return None
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            LEASE_SQL,
            {
                "id": delivery_id,
                "pending": Delivery.Status.PENDING,
                "now": now,
                "lease": now + timedelta(seconds=lease_s(timeout)),
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    number, url, secret, webhook_id, payload = row
    if isinstance(payload, str):
        payload = json.loads(payload)
    return number, url, secret, webhook_id, payload


def send(delivery_id: int, *, timeout: float | None = None) -> str:
    """Attempt one delivery if it is due; returns its status afterwards ("skipped", "not due")."""
    timeout = timeout_s() if timeout is None else timeout
    lease = leased(delivery_id, timeout)
    if lease is not None:
        number, url, secret, webhook_id, payload = lease
        response = post(url, secret, webhook_id=webhook_id, payload=payload, timeout=timeout)
        return record(delivery_id, number, response)
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("fleet")
            .filter(pk=delivery_id, status=Delivery.Status.PENDING)
            .first()
        )
        if delivery is None:
            return "skipped"
        now = timezone.now()
        if delivery.next_attempt_at > now:
            return "not due"
        fleet = delivery.fleet
        if not fleet.callback_url or fleet.callback_disabled_at:
            delivery.status = Delivery.Status.DISABLED
            delivery.last_error = "the fleet's callback is " + (
                "disabled" if fleet.callback_disabled_at else "not set"
            )
            delivery.save(update_fields=["status", "last_error"])
            return delivery.status
        delivery.attempts += 1
        delivery.next_attempt_at = now + timedelta(seconds=lease_s(timeout))
        delivery.save(update_fields=["attempts", "next_attempt_at"])
        url, secret = fleet.callback_url, fleet.callback_secret
        webhook_id, payload, number = delivery.webhook_id, delivery.payload, delivery.attempts
    response = post(url, secret, webhook_id=webhook_id, payload=payload, timeout=timeout)
    return record(delivery_id, number, response)


# When the exchange under way must end (time.monotonic()): every connect, read and write waits
# at most until then, however little each read brings.
_deadline: ContextVar[float | None] = ContextVar("delivery_deadline", default=None)


def _within(timeout: float | None, late: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise late("the deadline of the whole exchange has passed")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _within(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _within(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _within(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sockets, each wait cut short at the exchange's deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        timeout = _within(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport over `_DeadlineBackend` (httpx takes no network backend itself)."""

    def __init__(self) -> None:
        super().__init__()
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )


# No lock: a lock held across a fork would stay held in the child. Two threads racing on the
# first delivery each build one, and the loser's client is dropped.
_client: tuple[int, httpx.Client] | None = None


def client() -> httpx.Client:
    """This process's HTTP client: one TLS context and one connection pool for every delivery.

    Built on first use in the process that sends, never inherited: a Celery prefork child that
    finds its parent's client (same object, other pid) builds its own rather than share sockets.
    Like `httpx.post`, it follows no redirect; unlike a bare client, it keeps no cookies, so no
    receiver's cookie is sent back, to it or to another fleet's endpoint.
    """
    global _client
    pid = os.getpid()
    found = _client
    if found is None or found[0] != pid:
        jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        found = _client = (
            pid,
            httpx.Client(cookies=jar, follow_redirects=False, transport=_DeadlineTransport()),
        )
    return found[1]


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """What a receiver said, as the database can hold it: a NUL byte or an unpaired surrogate
    (which PostgreSQL refuses in text) becomes U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def _body_start(answer: httpx.Response) -> tuple[str, bool]:
    """The start of the answer's body as text, and whether the deadline cut the reading short."""
    read = b""
    late = False
    try:
        for chunk in answer.iter_raw():
            read += chunk
            if len(read) >= BODY_READ_BYTES:
                break
    except httpx.TimeoutException:
        late = True
    try:
        text = read[:BODY_READ_BYTES].decode(answer.encoding or "utf-8", errors="replace")
    except LookupError:
        text = read[:BODY_READ_BYTES].decode("utf-8", errors="replace")
    return text, late


def _said(answer: httpx.Response, text: str, late: bool, timeout: float) -> str:
    """What is logged of an answer that is not a success."""
    if 300 <= answer.status_code < 400:
        where = answer.headers.get("location", "")
        said = "redirects are not followed: " + (
            f"set the callback URL to {where}" if where else "the answer named no Location"
        )
    else:
        said = text[:ERROR_CHARS]
    if late:
        said += f" (the rest of the answer was not read: it took longer than {timeout:g} s)"
    return said


def post(url: str, secret: str, *, webhook_id: str, payload: object, timeout: float) -> Response:
    """One signed POST; the signature is fresh (a new timestamp), the webhook-id never changes.

    The whole exchange ends within `timeout`: a success counts once its status line is in, and
    of any other answer at most `BODY_READ_BYTES` are read, while time remains."""
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    headers = signing.sign(secret, msg_id=webhook_id, timestamp=int(time.time()), body=body)
    headers["content-type"] = "application/json"
    headers["user-agent"] = USER_AGENT
    started = time.monotonic()
    deadline = _deadline.set(started + timeout)
    try:
        with client().stream("POST", url, content=body, headers=headers, timeout=timeout) as answer:
            text, late = _body_start(answer)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        if isinstance(exc, httpx.TimeoutException):
            problem = f"{exc.__class__.__name__}: no answer within {timeout:g} s"
        else:
            problem = f"{exc.__class__.__name__}: {exc}"
        return Response(
            status_code=None,
            error=storable(problem[:500]),
            retry_after=None,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    finally:
        _deadline.reset(deadline)
    return Response(
        status_code=answer.status_code,
        error="" if answer.is_success else storable(_said(answer, text, late, timeout)),
        retry_after=retry_after(answer.headers, timezone.now())
        if answer.status_code in THROTTLED
        else None,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


@transaction.atomic
def record(delivery_id: int, number: int, response: Response) -> str:
    """Log the try, and deliver, disable, fail or schedule the next one."""
    delivery = (
        Delivery.objects.select_for_update(of=("self",))
        .select_related("fleet")
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None:
        return "skipped"
    DeliveryAttempt.objects.create(
        delivery=delivery,
        status_code=response.status_code,
        error=response.error,
        duration_ms=response.duration_ms,
    )
    now = timezone.now()
    code = response.status_code
    if delivery.status != Delivery.Status.PENDING:
        return delivery.status
    delivery.last_status_code = code
    delivery.last_error = response.error
    if code is not None and 200 <= code < 300:
        delivery.status = Delivery.Status.DELIVERED
        delivery.delivered_at = now
        delivery.save()
        return delivery.status
    if code == 410:
        fleet = delivery.fleet
        fleet.callback_disabled_at = now
        fleet.callback_disabled_reason = f"the receiver answered 410 Gone to {delivery.webhook_id}"
        fleet.save(update_fields=["callback_disabled_at", "callback_disabled_reason"])
        # Gone means gone: nothing else queued for that endpoint is sent either.
        # Their own last answer (say a 429) is in their log: what stopped them is another's.
        Delivery.objects.filter(fleet=fleet, status=Delivery.Status.PENDING).exclude(
            pk=delivery.pk
        ).update(
            status=Delivery.Status.DISABLED,
            last_status_code=None,
            last_error=f"not sent: the receiver answered 410 Gone to {delivery.webhook_id}, "
            "which disabled the fleet's callback",
        )
        delivery.status = Delivery.Status.DISABLED
        delivery.save()
        return delivery.status
    if delivery.attempts != number:
        # The lease ran out and another worker tried again meanwhile: that try schedules the next.
        delivery.save(update_fields=["last_status_code", "last_error"])
        return delivery.status
    window = retry_window_s()
    if (now - delivery.created_at).total_seconds() >= window:
        delivery.status = Delivery.Status.FAILED
        delivery.save()
        return delivery.status
    wait = backoff(delivery.attempts)
    if response.retry_after is not None:
        wait = max(wait, min(response.retry_after, window))
    delivery.next_attempt_at = now + timedelta(seconds=wait)
    delivery.save()
    schedule(delivery_id, wait)
    return delivery.status


def schedule(delivery_id: int, wait: float) -> None:
    delay = countdown(wait)
    after_commit(tasks.deliver, delivery_id, countdown=delay)
