"""The delivery log: members see what was sent to their fleets' callbacks and how it went."""

import time

import pytest
from django.utils import timezone

from fleet import services
from fleet.models import Delivery, DeliveryAttempt
from tests.conftest import wsgi_headers

pytestmark = pytest.mark.django_db


def delivery(fleet, type="task.ready", status="delivered", code=200, **data):
    d = Delivery.objects.create(
        fleet=fleet,
        webhook_id=f"msg_{Delivery.objects.count()}_{type}",
        type=type,
        payload={"type": type, "timestamp": "2026-12-03T08:00:00Z", "data": data},
        status=status,
        attempts=1,
        last_status_code=code,
        next_attempt_at=timezone.now(),
    )
    DeliveryAttempt.objects.create(delivery=d, status_code=code, duration_ms=12)
    return d


@pytest.fixture
def bob(fleet):
    fleet.callback_url = "https://agents.example.com/hooks"
    fleet.save()
    user, _ = services.member_add(username="bob", fleet=fleet, role="reviewer")
    return user


def test_a_member_sees_each_delivery_with_its_status_and_the_receivers_answer(client, bob, fleet):
    delivery(fleet, run="r1", task="push")
    delivery(fleet, type="run.failed", status="pending", code=503, run="r1")
    client.force_login(bob)
    page = client.get("/deliveries/").content.decode()

    assert "https://agents.example.com/hooks" in page and "enabled" in page
    assert "task.ready" in page and "r1 / push" in page and "HTTP 200" in page
    assert "run.failed" in page and "HTTP 503" in page and "pending" in page


def test_a_failed_runs_cause_and_the_time_of_delivery_are_shown(client, bob, fleet):
    failed = delivery(fleet, type="run.failed", run="r1", cause="push: the forge is down")
    Delivery.objects.filter(pk=failed.pk).update(delivered_at=failed.created_at)
    delivery(fleet, type="run.failed", status="pending", code=503, run="r2", cause="later")
    client.force_login(bob)
    page = client.get("/deliveries/").content.decode()

    assert "cause: push: the forge is down" in page and "cause: later" in page
    assert page.count("<small>at <time datetime=") == 1
    assert f'at <time datetime="{timezone.localtime(failed.created_at).isoformat()}' in page


def test_it_filters_by_status_and_pages_back_in_time(client, bob, fleet, settings):
    from fleet import selectors

    for n in range(selectors.DELIVERIES_PAGE + 5):
        delivery(fleet, run=f"r{n}")
    delivery(fleet, type="run.failed", status="failed", code=500, run="bad")
    client.force_login(bob)

    failed = client.get("/deliveries/?status=failed").content.decode()
    assert "run.failed" in failed and "task.ready" not in failed
    first = client.get("/deliveries/").content.decode()
    assert "Older deliveries" in first and ">r3<" not in first
    older = Delivery.objects.order_by("-id")[selectors.DELIVERIES_PAGE - 1].pk
    second = client.get(f"/deliveries/?before={older}").content.decode()
    assert ">r3<" in second and "Older deliveries" not in second


@pytest.mark.parametrize("before", ["²", "٣", "9" * 30, "-1"])
def test_a_before_that_is_no_delivery_id_shows_the_first_page(client, bob, fleet, before):
    """ "²" passed isdigit and failed int(); 30 digits overflowed the column: both were 500s."""
    delivery(fleet, run="r1", task="push")
    client.force_login(bob)
    response = client.get("/deliveries/", {"before": before})
    assert response.status_code == 200
    assert "r1 / push" in response.content.decode()


def test_a_disabled_endpoint_says_why(client, bob, fleet):
    fleet.callback_disabled_at = timezone.now()
    fleet.callback_disabled_reason = "the receiver answered 410 Gone"
    fleet.save()
    client.force_login(bob)
    page = client.get("/deliveries/").content.decode()
    assert "disabled" in page and "410 Gone" in page


def test_another_fleets_deliveries_are_not_shown(client, bob):
    other = services.fleet_create(name="globex", callback_url="https://globex.example.com/h")
    delivery(other, run="secret-run")
    client.force_login(bob)
    page = client.get("/deliveries/?fleet=globex").content.decode()
    assert "secret-run" not in page and "globex.example.com" not in page


def test_a_stranger_is_asked_to_sign_in(client):
    response = client.get("/deliveries/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_demo_callback_takes_what_the_fleet_signed_and_refuses_the_rest(client):
    from fleet import signing

    fleet = services.fleet_create(
        name="demo", callback_url="http://127.0.0.1:8000/demo/callback/demo"
    )
    body = b'{"type": "run.failed", "timestamp": "2026-12-03T10:00:00Z", "data": {}}'
    headers = signing.sign(
        fleet.callback_secret, msg_id="msg_1", timestamp=int(time.time()), body=body
    )
    extra = wsgi_headers(headers)
    ok = client.post("/demo/callback/demo", body, content_type="application/json", **extra)
    assert ok.status_code == 204
    forged = signing.sign(
        "whsec_" + "A" * 32, msg_id="msg_2", timestamp=int(time.time()), body=body
    )
    extra = wsgi_headers(forged)
    assert (
        client.post(
            "/demo/callback/demo", body, content_type="application/json", **extra
        ).status_code
        == 401
    )
    assert (
        client.post(
            "/demo/callback/nobody", body, content_type="application/json", **extra
        ).status_code
        == 401
    )


def test_the_page_title_is_its_name_and_the_log_is_shown_once(client, bob, fleet):
    delivery(fleet, run="r1", task="push")
    client.force_login(bob)
    page = client.get("/deliveries/").content.decode()

    assert "<title>Deliveries · Bulkhead</title>" in page
    assert page.count('id="messages-title"') == 1


def test_the_messages_are_listed_newest_first_by_when_they_were_made(client, desk, bob):
    """The demo records messages at its stories' times: listed by id, the Created column ran
    02:21, 02:24, 02:23."""
    from escalations.models import Message

    escalation = desk.escalate()
    now = timezone.now()
    for minutes, reason in ((3, "first"), (9, "latest"), (6, "middle")):  # ids in another order
        Message.objects.create(
            escalation=escalation, kind="email", target=f"{reason}@example.com", reason=reason,
            subject="s", body="b", next_attempt_at=now, created_at=now.replace(minute=minutes),
        )  # fmt: skip
    client.force_login(bob)
    page = client.get("/deliveries/").content.decode()
    shown = [page.index(f"{reason}@example.com") for reason in ("latest", "middle", "first")]
    assert shown == sorted(shown)
