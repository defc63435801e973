"""Outbound notifications against a real HTTP receiver on loopback: signed, retried, never lost."""

import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from django.db import transaction
from django.db.models import F
from django.test import TestCase
from django.utils import timezone

from fleet import deliveries
from fleet.broker import countdown
from fleet.models import Delivery, DeliveryAttempt, Fleet
from fleet.outbox import notify
from fleet.tasks import reconcile
from tests.conftest import HANG, Answer, Receiver, eventually, hook, receiving, task

pytestmark = pytest.mark.django_db


@pytest.fixture
def http11_receiver() -> Iterator[Receiver]:
    yield from receiving(keep_alive=True)


def notify_committed(fleet: Fleet, type: str = "task.ready", **data: Any) -> Delivery:
    """Notify in a transaction and run its after-commit work, as a committed change would."""
    with TestCase.captureOnCommitCallbacks(execute=True), transaction.atomic():
        delivery = notify(fleet, type, {"run": "r1", "task": "a", **data})
    assert delivery is not None
    delivery.refresh_from_db()
    return delivery


def make_due(*deliveries_: Delivery) -> None:
    Delivery.objects.filter(pk__in=[d.pk for d in deliveries_]).update(
        next_attempt_at=timezone.now()
    )


def travel(seconds: float) -> None:
    """Move every pending delivery `seconds` into the past: the outage lasted that much longer."""
    Delivery.objects.filter(status=Delivery.Status.PENDING).update(
        created_at=F("created_at") - timedelta(seconds=seconds),
        next_attempt_at=F("next_attempt_at") - timedelta(seconds=seconds),
    )


def test_a_change_is_delivered_signed_under_its_deliverys_webhook_id(
    hooked, receiver, planner, coder
):
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})

    delivery = Delivery.objects.get(type="task.ready")
    assert delivery.status == "delivered"
    [got] = receiver.of_type("task.ready")
    assert got.signed
    assert got.webhook_id == delivery.webhook_id
    assert got.headers["content-type"] == "application/json"
    assert got.body["data"] == {"run": "r1", "task": "a", "agent": "coder"}
    assert set(got.body) == {"type", "timestamp", "data"}
    [logged] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert logged.status_code == 200


def test_a_change_that_rolls_back_sends_nothing(hooked, receiver):
    with (
        pytest.raises(RuntimeError),
        TestCase.captureOnCommitCallbacks(execute=True),
        transaction.atomic(),
    ):
        notify(hooked, "task.ready", {"run": "r1", "task": "a"})
        raise RuntimeError("the change failed")

    assert not Delivery.objects.exists()
    assert receiver.received == []


def test_a_fleet_without_a_callback_records_nothing(fleet):
    assert notify(fleet, "task.ready", {"run": "r1", "task": "a"}) is None
    assert not Delivery.objects.exists()


def test_a_refused_delivery_is_retried_with_growing_backoff_under_the_same_id(hooked, receiver):
    receiver.script = [500, 500]

    delivery = notify_committed(hooked)
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    first_wait = (delivery.next_attempt_at - DeliveryAttempt.objects.get().at).total_seconds()
    assert deliveries.BASE_DELAY_S * 0.5 <= first_wait <= deliveries.BASE_DELAY_S + 1
    assert deliveries.send(delivery.pk) == "not due"
    assert len(receiver.received) == 1

    make_due(delivery)
    assert deliveries.send(delivery.pk) == "pending"
    delivery.refresh_from_db()
    second = DeliveryAttempt.objects.order_by("-id").first()
    assert second is not None
    second_wait = (delivery.next_attempt_at - second.at).total_seconds()
    assert deliveries.BASE_DELAY_S <= second_wait <= 2 * deliveries.BASE_DELAY_S + 1

    make_due(delivery)
    assert deliveries.send(delivery.pk) == "delivered"
    assert receiver.ids() == [delivery.webhook_id] * 3
    assert all(r.signed for r in receiver.received)
    assert list(
        DeliveryAttempt.objects.filter(delivery=delivery)
        .order_by("id")
        .values_list("status_code", flat=True)
    ) == [500, 500, 200]
    assert deliveries.send(delivery.pk) == "skipped"  # delivered once, never again


def test_every_retry_is_signed_afresh(hooked, receiver):
    receiver.script = [503]
    delivery = notify_committed(hooked)
    make_due(delivery)
    deliveries.send(delivery.pk)

    first, second = receiver.received
    assert first.signed and second.signed
    assert first.webhook_id == second.webhook_id
    assert first.body == second.body


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_a_throttled_delivery_waits_as_long_as_the_receiver_asks(hooked, receiver, status):
    receiver.script = [(status, {"Retry-After": "600"})]

    before = timezone.now()
    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.last_status_code) == ("pending", status)
    assert delivery.next_attempt_at >= before + timedelta(seconds=600)


def test_a_retry_after_date_is_honoured(hooked, receiver):
    when = timezone.now() + timedelta(minutes=20)
    receiver.script = [(429, {"Retry-After": format_datetime(when, usegmt=True)})]

    delivery = notify_committed(hooked)

    assert delivery.next_attempt_at >= when - timedelta(seconds=2)


def test_a_retry_after_shorter_than_the_backoff_does_not_shorten_it(hooked, receiver):
    receiver.script = [(429, {"Retry-After": "0"})]

    before = timezone.now()
    delivery = notify_committed(hooked)

    assert delivery.next_attempt_at >= before + timedelta(seconds=deliveries.BASE_DELAY_S * 0.5)


def test_a_retry_after_on_an_error_that_is_not_a_throttle_is_ignored(hooked, receiver):
    receiver.script = [(500, {"Retry-After": "7200"})]

    delivery = notify_committed(hooked)

    assert delivery.next_attempt_at < timezone.now() + timedelta(seconds=60)


def test_a_gone_receiver_disables_the_endpoint(hooked, receiver):
    receiver.script = [(503, {"Retry-After": "60"}), 410]
    waiting = notify_committed(hooked, task="b")
    gone = notify_committed(hooked, task="c")

    assert gone.status == "disabled"
    hooked.refresh_from_db()
    assert hooked.callback_disabled_at is not None
    assert gone.webhook_id in hooked.callback_disabled_reason
    waiting.refresh_from_db()
    assert waiting.status == "disabled"  # nothing else goes to an endpoint that is gone
    # Its last answer is not mixed with another's: what stopped it is the other's 410.
    assert waiting.last_status_code is None
    assert waiting.last_error == (
        f"not sent: the receiver answered 410 Gone to {gone.webhook_id}, "
        "which disabled the fleet's callback"
    )
    [own] = DeliveryAttempt.objects.filter(delivery=waiting)
    assert own.status_code == 503
    assert notify(hooked, "task.ready", {"run": "r1", "task": "d"}) is None
    make_due(waiting)
    assert deliveries.send(waiting.pk) == "skipped"
    assert len(receiver.received) == 2


def test_a_disabled_endpoint_drops_what_was_queued_before_it_was_disabled(hooked, receiver):
    delivery = Delivery.objects.create(
        fleet=hooked,
        webhook_id="msg_queued",
        type="task.ready",
        payload={},
        next_attempt_at=timezone.now(),
    )
    Fleet.objects.filter(pk=hooked.pk).update(callback_disabled_at=timezone.now())

    assert deliveries.send(delivery.pk) == "disabled"
    delivery.refresh_from_db()
    assert delivery.last_error == "the fleet's callback is disabled"
    assert receiver.received == []


def test_a_receiver_that_cannot_be_reached_is_logged_and_retried(hooked, receiver):
    receiver.stop()

    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.last_status_code) == ("pending", None)
    assert delivery.last_error.startswith("ConnectError")
    [logged] = DeliveryAttempt.objects.all()
    assert logged.status_code is None and logged.error.startswith("ConnectError")


def test_a_receiver_down_for_ten_minutes_loses_nothing(hooked, receiver, planner, coder, settings):
    settings.RECONCILE_GRACE_SECONDS = 0
    receiver.stop()
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b"), task("c")]})
    queued = list(Delivery.objects.order_by("id"))
    assert [d.type for d in queued] == ["task.ready"] * 3
    assert all(d.status == "pending" for d in queued)

    outage = 0.0
    while outage < 10 * 60:
        wait = max(
            (d.next_attempt_at - timezone.now()).total_seconds()
            for d in Delivery.objects.filter(status="pending")
        )
        travel(wait)
        outage += wait
        reconcile()
    assert Delivery.objects.filter(status="pending").count() == 3
    assert min(d.attempts for d in Delivery.objects.all()) >= 5

    receiver.start()
    travel(deliveries.MAX_DELAY_S)
    reconcile()

    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}
    assert sorted(receiver.ids()) == sorted(d.webhook_id for d in queued)
    assert all(r.signed for r in receiver.received)


def test_a_delivery_is_failed_once_its_retry_window_is_over(hooked, receiver, settings):
    settings.DELIVERY_RETRY_WINDOW_SECONDS = 3600
    receiver.script = [500, 500]
    delivery = notify_committed(hooked)
    travel(3600)

    assert deliveries.send(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_status_code) == ("failed", 500)
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 2


def test_a_worker_that_died_mid_request_leaves_the_delivery_leased_then_due(hooked, receiver):
    """The claim is committed before the request: a crash in the middle leaves a lease, not a lock."""
    receiver.stop()
    delivery = Delivery.objects.create(
        fleet=hooked, webhook_id="msg_leased", type="task.ready", payload={"type": "task.ready"},
        next_attempt_at=timezone.now(),
    )  # fmt: skip

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("the worker died")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deliveries, "post", crash)
        with pytest.raises(SystemExit):
            deliveries.send(delivery.pk)

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert delivery.next_attempt_at > timezone.now()  # leased: no second worker sends it now
    assert deliveries.send(delivery.pk) == "not due"
    receiver.start()
    make_due(delivery)
    assert deliveries.send(delivery.pk) == "delivered"
    assert receiver.ids() == ["msg_leased"]


def test_the_lease_is_three_timeouts_and_30s_unless_configured(settings):
    settings.DELIVERY_LEASE_SECONDS = 0
    assert deliveries.lease_s(10) == 60
    settings.DELIVERY_LEASE_SECONDS = 7
    assert deliveries.lease_s(2) == 7
    # Never shorter than a request may take: connect, write and read may each take the timeout.
    assert deliveries.lease_s(10) == 30


def test_a_send_holds_the_delivery_for_the_configured_lease(hooked, receiver, settings):
    settings.DELIVERY_TIMEOUT_SECONDS = 2
    settings.DELIVERY_LEASE_SECONDS = 7
    receiver.stop()
    delivery = Delivery.objects.create(
        fleet=hooked, webhook_id="msg_lease7", type="task.ready", payload={"type": "task.ready"},
        next_attempt_at=timezone.now(),
    )  # fmt: skip

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("the worker died")

    before = timezone.now()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deliveries, "post", crash)
        with pytest.raises(SystemExit):
            deliveries.send(delivery.pk)
    delivery.refresh_from_db()
    assert before + timedelta(seconds=7) <= delivery.next_attempt_at
    assert delivery.next_attempt_at <= timezone.now() + timedelta(seconds=7)


def test_deliveries_to_a_receiver_that_keeps_connections_alive_share_one(fleet, http11_receiver):
    hooked = hook(fleet, http11_receiver)

    notify_committed(hooked, task="a")
    notify_committed(hooked, task="b")

    first, second = http11_receiver.received
    assert first.signed and second.signed
    assert first.peer == second.peer
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}


def test_a_cookie_the_receiver_sets_is_never_sent_back(hooked, receiver):
    receiver.script = [(200, {"Set-Cookie": "session=abc; Path=/"})]
    notify_committed(hooked, task="a")
    notify_committed(hooked, task="b")

    assert [r.headers.get("cookie") for r in receiver.received] == [None, None]


def test_a_redirect_is_not_followed(hooked, receiver):
    receiver.script = [(307, {"Location": receiver.url + "/elsewhere"})]

    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.last_status_code) == ("pending", 307)
    assert len(receiver.received) == 1


def test_a_receiver_that_trickles_its_headers_is_given_up_on_at_the_timeout(hooked, settings):
    """Each read brings a byte, so no read times out: the whole exchange's deadline ends it."""
    settings.DELIVERY_TIMEOUT_SECONDS = 1
    listener = socket.create_server(("127.0.0.1", 0))
    trickled = []
    done = threading.Event()

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 400:
                    conn.sendall(bytes([byte]))
                    trickled.append(byte)
                    if done.wait(0.05):
                        break
            except OSError:
                pass

    threading.Thread(target=answer, daemon=True).start()
    Fleet.objects.filter(pk=hooked.pk).update(
        callback_url=f"http://127.0.0.1:{listener.getsockname()[1]}/bulkhead"
    )
    hooked.refresh_from_db()
    try:
        delivery = notify_committed(hooked)
    finally:
        done.set()
        listener.close()

    assert (delivery.status, delivery.last_status_code) == ("pending", None)
    assert delivery.last_error == "ReadTimeout: no answer within 1 s"
    assert len(trickled) < 400


def test_a_redirect_is_logged_with_where_the_callback_should_point(hooked, receiver):
    receiver.script = [Answer(308, b"", {"Location": "https://hooks.example.com/new"})]

    delivery = notify_committed(hooked)

    assert delivery.last_error == (
        "redirects are not followed: set the callback URL to https://hooks.example.com/new"
    )
    [logged] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert (logged.status_code, logged.error) == (308, delivery.last_error)


def test_an_error_answer_with_a_nul_byte_is_logged_and_retried(hooked, receiver):
    receiver.script = [Answer(500, b"boom\x00nul")]

    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    assert delivery.last_error == "boom\ufffdnul"
    [logged] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert (logged.status_code, logged.error) == (500, "boom\ufffdnul")
    assert delivery.next_attempt_at > timezone.now()  # backed off, not leased and sent again


def test_a_success_whose_body_trickles_in_is_delivered_without_waiting_for_it(
    hooked, receiver, settings
):
    settings.DELIVERY_TIMEOUT_SECONDS = 1
    receiver.script = [Answer(200, b"x" * 400, slowly=0.05)]

    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.attempts) == ("delivered", 1)
    [logged] = DeliveryAttempt.objects.filter(delivery=delivery)
    assert (logged.status_code, logged.error) == (200, "")
    assert receiver.body_bytes_sent < 400  # the try ended while the body still trickled in


def test_an_error_whose_body_trickles_in_is_cut_short_logged_and_backed_off(
    hooked, receiver, settings
):
    settings.DELIVERY_TIMEOUT_SECONDS = 1
    receiver.script = [Answer(500, b"e" * 400, slowly=0.05)]

    delivery = notify_committed(hooked)

    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    assert delivery.last_error.startswith("e")
    assert delivery.last_error.endswith(
        "(the rest of the answer was not read: it took longer than 1 s)"
    )
    assert delivery.next_attempt_at > timezone.now()
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 1


def test_a_forked_worker_process_builds_its_own_client(monkeypatch):
    parent = deliveries.client()
    assert deliveries.client() is parent

    monkeypatch.setattr(deliveries.os, "getpid", lambda: -1)
    child = deliveries.client()

    assert child is not parent
    assert deliveries.client() is child


def test_a_countdown_never_outlives_the_brokers_visibility_timeout(settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 7200}
    assert countdown(30) == 30
    assert countdown(3 * 3600) == 3600
    assert countdown(-5) == 0


def test_backoff_grows_exponentially_with_jitter_up_to_a_cap():
    import random

    rng = random.Random(4)
    waits = [deliveries.backoff(n, rng) for n in range(1, 12)]
    for n, wait in enumerate(waits, start=1):
        full = min(deliveries.MAX_DELAY_S, deliveries.BASE_DELAY_S * 2 ** (n - 1))
        assert full / 2 <= wait <= full
    assert len(set(waits)) == len(waits)  # jittered, not in lockstep
    assert deliveries.backoff(10_000, rng) <= deliveries.MAX_DELAY_S


# A real worker on PostgreSQL: a worker killed mid-delivery, and an outage it rides out.


def wait_until_received(receiver: Receiver, n: int = 1) -> None:
    eventually(lambda: len(receiver.received) >= n)


@pytest.mark.worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_delivery_loses_nothing(worker, hooked, receiver, planner, coder):
    receiver.script = [HANG]
    planner.post("run.started", {"run": "r1", "tasks": [task("a")]})
    wait_until_received(receiver)  # the worker is inside the request, which hangs
    delivery = Delivery.objects.get(type="task.ready")

    worker.kill()
    receiver.release.set()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert not DeliveryAttempt.objects.filter(delivery=delivery).exists()

    worker.restart()
    make_due(delivery)  # its lease has run out
    reconcile.delay()

    eventually(lambda: Delivery.objects.get(pk=delivery.pk).status == "delivered")
    assert receiver.ids() == [delivery.webhook_id] * 2  # the same id: the receiver dedupes
    assert len(set(receiver.ids())) == 1
    assert list(
        DeliveryAttempt.objects.filter(delivery=delivery).values_list("status_code", flat=True)
    ) == [200]


@pytest.mark.worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_worker_rides_out_a_receiver_outage(worker, hooked, receiver, planner, coder):
    receiver.stop()
    planner.post("run.started", {"run": "r1", "tasks": [task("a"), task("b")]})
    eventually(
        lambda: (
            Delivery.objects.filter(attempts__gte=1).count() == 2
            and DeliveryAttempt.objects.count() >= 2
        )
    )
    assert set(Delivery.objects.values_list("status", flat=True)) == {"pending"}
    travel(10 * 60)  # ten minutes later the receiver is back

    receiver.start()
    make_due(*Delivery.objects.all())
    reconcile.delay()

    eventually(lambda: set(Delivery.objects.values_list("status", flat=True)) == {"delivered"})
    assert sorted(set(receiver.ids())) == sorted(
        Delivery.objects.values_list("webhook_id", flat=True)
    )
    assert all(r.signed for r in receiver.received)
    assert len(receiver.received) == 2
