"""Handing off from the packet page, and the notifications page: away, one's own channels and
(a manager) the fleet's; every refusal says why on the page."""

import pytest

from escalations.models import Channel
from tests.escalations.desk import member
from tests.escalations.routed import pool, route


@pytest.fixture
def routed(desk, alice):
    member("bob", desk.fleet)
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    return desk


def test_a_reviewer_hands_off_from_the_packet_page(routed, browser):
    escalation = routed.escalate()
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Assigned to alice" in page and "Hand it to" in page
    response = browser.post(
        f"/escalations/{escalation.pk}/hand-off/", {"to": "bob", "note": "Bob owns pricing"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/escalations/{escalation.pk}/#assignment"
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Assigned to bob" in page
    assert "handed off to bob by alice" in page and "Bob owns pricing" in page


def test_a_refused_hand_off_says_why_and_keeps_the_note(routed, browser):
    escalation = routed.escalate()
    response = browser.post(
        f"/escalations/{escalation.pk}/hand-off/", {"to": "zed", "note": "keep me"}, follow=True
    )
    page = response.content.decode()
    assert "to: &#x27;zed&#x27; is not a reviewer of fleet acme" in page
    assert "keep me" in page


def test_a_hand_off_of_a_handled_escalation_is_refused(routed, browser, alice):
    from escalations.services import escalation_answer
    from tests.conftest import committed

    escalation = routed.escalate()
    committed(escalation_answer, escalation=escalation, reviewer=alice, text="Use the threshold")
    page = browser.post(
        f"/escalations/{escalation.pk}/hand-off/", {"to": "bob", "note": "late"}, follow=True
    ).content.decode()
    assert "This escalation is answered: only a waiting one can be handed off." in page


def test_a_reviewer_marks_themself_away_and_adds_a_channel(routed, browser, alice):
    assert "You are taking escalations" in browser.get("/notifications/").content.decode()
    browser.post("/notifications/", {"action": "away", "away": "1"})
    assert "You are away" in browser.get("/notifications/").content.decode()
    browser.post(
        "/notifications/", {"action": "add", "kind": "chat", "target": "slack://T1/B2/secrettoken"}
    )
    page = browser.get("/notifications/").content.decode()
    assert "secrettoken" not in page  # Apprise's private form of the URL
    assert Channel.objects.get(user=alice).target == "slack://T1/B2/secrettoken"
    routed.run("two")
    assert routed.escalate(run="two").assignee is None  # alice, the pool's one reviewer, is away


@pytest.mark.parametrize(
    ("data", "status", "expected"),
    [
        (
            {"action": "add", "kind": "email", "target": "nope"},
            422,
            "&#x27;nope&#x27; is not an email address",
        ),
        (
            {"action": "add", "kind": "chat", "target": "json://x", "fleet": "acme"},
            403,
            "You do not manage a fleet named &#x27;acme&#x27;.",
        ),
        ({"action": "remove", "channel": "x"}, 400, "That is not a channel."),
        ({"action": "dance"}, 400, "&#x27;dance&#x27; is not something this page does."),
    ],
)
def test_the_notifications_page_refuses_saying_why(routed, browser, data, status, expected):
    response = browser.post("/notifications/", data)
    assert response.status_code == status
    assert expected in response.content.decode()


def test_a_refused_channel_is_shown_again_as_it_was_typed(routed, browser):
    typed = "json://hooks.example.com/" + "a" * 1200
    response = browser.post("/notifications/", {"action": "add", "kind": "chat", "target": typed})
    page = response.content.decode()
    assert response.status_code == 422
    assert "is longer than 1000 characters" in page
    assert f'name="target" required value="{typed}"' in page
    assert '<option value="chat" selected>' in page


def test_a_manager_sets_where_the_fleet_is_announced(routed, client):
    manny = member("manny", routed.fleet, role="manager")
    client.force_login(manny)
    page = client.get("/notifications/").content.decode()
    assert "Fleet acme (you manage it)" in page and "pool planners" in page
    client.post(
        "/notifications/",
        {"action": "add", "kind": "email", "target": "ops@example.com", "fleet": "acme"},
    )
    channel = Channel.objects.get(fleet=routed.fleet)
    assert channel.target == "ops@example.com"
    client.post("/notifications/", {"action": "remove", "channel": str(channel.pk)})
    assert not Channel.objects.exists()


def test_nobody_removes_another_persons_channel(routed, browser):
    bobs = Channel.objects.create(
        user=routed.fleet.memberships.get(user__username="bob").user,
        kind="email",
        target="bob@example.com",
    )
    response = browser.post("/notifications/", {"action": "remove", "channel": str(bobs.pk)})
    assert response.status_code == 403
    assert Channel.objects.filter(pk=bobs.pk).exists()


def test_the_deliveries_page_lists_the_messages_sent(routed, browser, alice):
    alice.email = "alice@example.com"
    alice.save()
    routed.run("two")
    escalation = routed.escalate(run="two")
    page = browser.get("/deliveries/").content.decode()
    assert "Emails and chat messages about escalations" in page
    assert (
        f'href="/escalations/{escalation.pk}/"' in page
        and "email: <code>alice@example.com</code>" in page
    )


def test_a_manager_hands_an_escalation_that_reached_them_to_a_reviewer(routed, client):
    manny = member("manny", routed.fleet, role="manager")
    escalation = routed.escalate()
    client.force_login(manny)
    assert "Hand it to" in client.get(f"/escalations/{escalation.pk}/").content.decode()
    client.post(f"/escalations/{escalation.pk}/hand-off/", {"to": "bob", "note": "Bob, please"})
    escalation.refresh_from_db()
    assert escalation.assignee.get_username() == "bob"


def test_a_visit_to_the_hand_off_address_goes_to_the_packet(routed, browser):
    escalation = routed.escalate()
    response = browser.get(f"/escalations/{escalation.pk}/hand-off/")
    assert response.status_code == 302 and response["Location"] == f"/escalations/{escalation.pk}/"
