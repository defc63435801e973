"""Messages about escalations: an email through a real SMTP server (aiosmtpd) whose signed link
opens the packet page after sign-in, a chat message through Apprise to a loopback webhook,
retries, and expired or altered links."""

import re
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from email import message_from_bytes
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.core import signing
from django.db.models import F
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from escalations import links
from escalations.models import Escalation, Message, RoutingRule
from escalations.services import messages, routing
from fleet.errors import Refusal
from runs.models import Run
from tests.conftest import committed
from tests.escalations.desk import QUESTION, member
from tests.escalations.routed import ChatReceiver, chat_receiver, due, pool, route


class Inbox:
    def __init__(self) -> None:
        self.mails: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.mails.append(message_from_bytes(envelope.content))
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    """A real SMTP server on loopback, and Django's mailer pointed at it."""
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5},
        }
    }
    yield inbox
    controller.stop()


@pytest.fixture
def chat() -> Iterator[ChatReceiver]:
    yield from chat_receiver()


@pytest.fixture
def routed(desk: Any, alice: Any) -> Any:
    """Alice takes the planners' escalations, due in an hour, and is reached by email."""
    alice.email = "alice@example.com"
    alice.save()
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    return desk


def test_the_email_reaches_the_reviewer_with_a_signed_link_that_needs_sign_in(
    routed, alice, smtp, settings
):
    settings.SITE_URL = "http://testserver"
    escalation = routed.escalate()
    assert len(smtp.mails) == 1
    mail = smtp.mails[0]
    assert mail["To"] == "alice@example.com"
    assert mail["Subject"] == "[Bulkhead] Assigned to you: tier-discounts / plan"
    body = mail.get_payload(decode=True).decode()
    assert f"Question: {QUESTION}" in body
    assert "Run: tier-discounts  Task: plan" in body
    assert "Waiting: 0h 0m" in body
    due_at = escalation.due_at.astimezone(timezone.get_fixed_timezone(0)).strftime(
        "%Y-%m-%d %H:%M UTC"
    )
    assert f"Due: {due_at}" in body
    link = re.search(r"http://testserver(/l/[^/\s]+/)", body).group(1)
    sent = Message.objects.get(escalation=escalation)
    assert (sent.status, sent.attempts, sent.reason) == ("sent", 1, "assigned")

    stranger = Client()
    first = stranger.get(link)
    assert first.status_code == 302 and first["Location"].startswith("/login/?next=/l/")
    stranger.force_login(alice)
    opened = stranger.get(link, follow=True)
    assert opened.redirect_chain[-1][0] == f"/escalations/{escalation.pk}/"
    assert opened.status_code == 200
    assert escape(QUESTION) in opened.content.decode()


def test_a_link_opens_nothing_for_someone_outside_the_fleet(routed, settings):
    escalation = routed.escalate()
    from fleet import services

    other = services.fleet_create(name="other")
    mallory = member("mallory", other)
    browser = Client()
    browser.force_login(mallory)
    page = browser.get(f"/l/{links.token_for(escalation.pk)}/", follow=True)
    assert page.status_code == 404


def test_an_expired_link_gets_a_clear_page(routed, alice, settings):
    escalation = routed.escalate()
    token = links.token_for(escalation.pk)
    settings.ESCALATION_LINK_MAX_AGE_SECONDS = 1
    browser = Client()
    browser.force_login(alice)
    later = time.time() + 5
    import unittest.mock

    with unittest.mock.patch("django.core.signing.time.time", return_value=later):
        page = browser.get(f"/l/{token}/")
    assert page.status_code == 410
    assert "This link has expired" in page.content.decode()


@pytest.mark.parametrize(
    ("max_age", "said"),
    [
        (3600, "1 hour"),
        (5400, "1 hour 30 minutes"),
        (7 * 86400, "7 days"),
        (129600, "1 day 12 hours"),
    ],
)
def test_an_expired_link_says_truly_how_long_links_open(routed, alice, settings, max_age, said):
    escalation = routed.escalate()
    token = links.token_for(escalation.pk)
    settings.ESCALATION_LINK_MAX_AGE_SECONDS = max_age
    browser = Client()
    browser.force_login(alice)
    import unittest.mock

    with unittest.mock.patch(
        "django.core.signing.time.time", return_value=time.time() + max_age + 5
    ):
        page = browser.get(f"/l/{token}/")
    assert page.status_code == 410
    assert f"open the escalation for {said} after they are sent" in page.content.decode()


def test_an_altered_link_gets_a_clear_page(routed, alice):
    escalation = routed.escalate()
    token = links.token_for(escalation.pk)
    forged = signing.dumps({"e": escalation.pk + 1}, salt="another-salt")
    browser = Client()
    browser.force_login(alice)
    for bad in (token[:-3] + "abc", forged, "nonsense"):
        page = browser.get(f"/l/{bad}/")
        assert page.status_code == 400, bad
        assert "This link is not valid" in page.content.decode()


def test_the_fleets_chat_channel_gets_the_announcement_through_apprise(routed, chat):
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    assert len(chat.received) == 1
    said = chat.received[0]
    assert said["title"] == "[Bulkhead] New escalation: tier-discounts / plan"
    assert QUESTION in said["message"]
    assert f"/l/{links.token_for(escalation.pk)[:10]}" in said["message"]
    assert Message.objects.get(kind="chat").status == "sent"


def test_a_failed_chat_send_is_logged_and_retried(routed, chat, settings):
    chat.script = [500]
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    message = Message.objects.get(escalation=escalation, kind="chat")
    assert (message.status, message.attempts) == ("pending", 1)
    assert "500" in message.last_error
    assert message.next_attempt_at > timezone.now()
    Message.objects.filter(pk=message.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    assert committed(messages.send, message.pk) == "sent"
    message.refresh_from_db()
    assert message.attempts == 2 and [t["ok"] for t in message.log] == [False, True]
    assert len(chat.received) == 2


def test_a_message_that_cannot_be_sent_fails_after_its_tries(routed, settings):
    settings.ESCALATION_MESSAGE_MAX_ATTEMPTS = 1
    routed.fleet.desk_channels.create(kind="chat", target=f"json://127.0.0.1:{free_port()}/gone")
    escalation = routed.escalate()
    message = Message.objects.get(escalation=escalation, kind="chat")
    assert message.status == "failed" and message.last_error


def test_the_packet_page_shows_the_messages_sent(routed, alice, chat):
    committed(messages.channel_add, user=alice, kind="chat", target=chat.url)
    escalation = routed.escalate()
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Assigned to alice" in page
    assert "assigned to json://127.0.0.1" in page and ": sent after 1 try, at " in page
    sent_at = Message.objects.get(escalation=escalation, kind="chat").sent_at
    assert f", at {timezone.localtime(sent_at):%H:%M:%S}" in page


@pytest.mark.parametrize(
    ("kind", "target", "expected"),
    [
        ("email", "not-an-address", "'not-an-address' is not an email address"),
        ("email", "a" * 300 + "@x.test", "is 307 characters; an email address has at most 254"),
        ("chat", "nosuchservice://x", "is not a chat URL Apprise knows"),
        ("sms", "123", "'sms' is not a channel kind"),
    ],
)
def test_a_bad_channel_is_refused_saying_why(fleet, kind, target, expected):
    with pytest.raises(Refusal, match=expected):
        messages.channel_add(fleet=fleet, kind=kind, target=target)


def test_the_reconciler_sends_a_message_whose_send_was_lost(routed, chat, settings):
    settings.RECONCILE_GRACE_SECONDS = 0
    chat.script = [503]
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    lost = Message.objects.get(escalation=escalation, kind="chat")
    assert lost.status == "pending"  # its retry's message never came (say the broker lost it)
    Message.objects.filter(pk=lost.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    from fleet.tasks import reconcile

    counts = committed(reconcile)
    assert counts["messages"] == 1
    lost.refresh_from_db()
    assert (lost.status, lost.attempts) == ("sent", 2)


def test_the_question_that_fills_a_draft_is_announced_with_it(routed, chat, alice, tmp_path):
    """The retry policy escalated with Bulkhead's draft (no question yet); the agent's question
    comes later and is announced then."""
    from tests.escalations.drafting import escalated_by_the_policy, orders_database, submit

    orders_database(routed.fleet, tmp_path)
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalated_by_the_policy(routed)
    assert "the agent's question is not in yet" in chat.messages()[0]
    filled = submit(routed, {"smallest_unblocking_question": QUESTION})
    assert filled.status_code == 202, filled.content
    assert filled.json()["packet"] == "filled"
    assert chat.received[-1]["title"].startswith("[Bulkhead] The agent's question is in")
    assert QUESTION in chat.messages()[-1]


def test_a_key_with_a_line_separator_still_reaches_the_reviewer_by_email(routed, alice, smtp):
    """A header may hold no line break: U+2028 in a run key becomes a space in the subject."""
    escalation = routed.escalate()
    Run.objects.filter(pk=escalation.run_id).update(key="tier\u2028discounts\u2029x\x85y")
    escalation = Escalation.objects.select_related("run", "task", "packet").get(pk=escalation.pk)

    [reminder] = committed(messages.queue_messages, escalation, "reminder", users=[alice])

    reminder.refresh_from_db()
    assert (reminder.status, reminder.last_error) == ("sent", "")
    assert smtp.mails[-1]["Subject"] == (
        "[Bulkhead] Reminder: half its time is gone: tier discounts x y / plan"
    )


def test_a_message_written_with_a_line_break_in_its_subject_is_still_sent(routed, smtp):
    escalation = routed.escalate()
    written = Message.objects.create(
        escalation=escalation, kind="email", target="bob@example.com", reason="reminder",
        subject="[Bulkhead] Reminder: a\u2028b / plan", body="-", next_attempt_at=timezone.now(),
        created_at=timezone.now(),
    )  # fmt: skip

    assert committed(messages.send, written.pk) == "sent"
    assert smtp.mails[-1]["Subject"] == "[Bulkhead] Reminder: a b / plan"


def outage_passes(seconds: float) -> None:
    """Every pending message's clock moves `seconds` on: it was written and tried that long ago."""
    Message.objects.filter(status="pending").update(
        created_at=F("created_at") - timedelta(seconds=seconds),
        next_attempt_at=F("next_attempt_at") - timedelta(seconds=seconds),
    )


def test_a_chat_outage_of_an_hour_loses_no_message(routed, chat):
    chat.script = [503] * 1000
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    message = Message.objects.get(escalation=escalation, kind="chat")

    outage = 0.0
    while outage < 3600:
        message.refresh_from_db()
        assert message.status == "pending", message.last_error
        wait = (message.next_attempt_at - timezone.now()).total_seconds()
        assert wait <= 5 * 60  # sent within 5 minutes of the service coming back
        outage_passes(wait)
        outage += wait
        committed(messages.send, message.pk)
    chat.script = []
    outage_passes(5 * 60)
    assert committed(messages.send, message.pk) == "sent"
    message.refresh_from_db()
    assert message.attempts == len(chat.received) > 8
    assert len(message.log) <= messages.LOG_TRIES and message.log[-1]["ok"]


def test_a_message_is_failed_once_its_retry_window_is_over(routed, chat, settings):
    settings.ESCALATION_MESSAGE_RETRY_WINDOW_SECONDS = 3600
    chat.script = [503, 503]
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    message = Message.objects.get(escalation=escalation, kind="chat")
    outage_passes(3600)

    assert committed(messages.send, message.pk) == "failed"


def test_a_slow_chat_service_that_accepts_gets_the_message_once(routed, chat):
    chat.slowly = 6  # longer than Apprise's own read timeout (4 s)
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)

    escalation = routed.escalate()

    message = Message.objects.get(escalation=escalation, kind="chat")
    assert (message.status, message.attempts) == ("sent", 1)
    assert len(chat.received) == 1


def test_a_chat_service_that_does_not_answer_in_time_is_logged_as_timed_out(
    routed, chat, monkeypatch
):
    monkeypatch.setattr(messages, "CHAT_TIMEOUT_S", 1.0)  # Apprise's 4 s then: never less
    chat.slowly = 8
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)

    escalation = routed.escalate()

    message = Message.objects.get(escalation=escalation, kind="chat")
    assert (message.status, message.attempts) == ("pending", 1)
    assert message.last_error == "timed out: the chat service did not answer within 4 s"


def test_a_hand_off_tells_the_new_reviewer_who_handed_it_and_why(routed, alice, smtp):
    bob = member("bob", routed.fleet)
    bob.email = "bob@example.com"
    bob.save()
    escalation = routed.escalate()

    committed(
        routing.escalation_hand_off,
        escalation=escalation, by=alice, to="bob", note="Bob knows the pricing config",
    )  # fmt: skip

    mail = smtp.mails[-1]
    assert mail["To"] == "bob@example.com"
    assert mail["Subject"] == "[Bulkhead] Handed to you by alice: tier-discounts / plan"
    body = mail.get_payload(decode=True).decode().splitlines()
    assert body[:2] == ["Handed to you by alice.", "Note: Bob knows the pricing config"]


def test_the_fleets_channels_are_told_whom_an_overdue_escalation_moved_to(
    routed, alice, chat, smtp
):
    bob = member("bob", routed.fleet)
    bob.email = "bob@example.com"
    bob.save()
    pool(routed.fleet, "seniors", "bob")
    RoutingRule.objects.filter(fleet=routed.fleet).delete()
    route(routed.fleet, "planners", next_pool="seniors")
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()

    assert committed(routing.sweep, escalation.opened_at + timedelta(minutes=70))["tier"] == 1

    assert chat.received[-1]["title"] == (
        "[Bulkhead] Overdue: moved to tier 2, pool seniors, assigned to bob: tier-discounts / plan"
    )
    assert smtp.mails[-1]["To"] == "bob@example.com"
    assert smtp.mails[-1]["Subject"] == "[Bulkhead] Overdue: moved to you: tier-discounts / plan"


def test_what_a_server_said_with_a_nul_byte_is_logged_and_retried(routed, chat):
    chat.script = [503]
    committed(messages.channel_add, fleet=routed.fleet, kind="chat", target=chat.url)
    escalation = routed.escalate()
    message = Message.objects.get(escalation=escalation, kind="chat")

    assert committed(messages.record, message.pk, message.attempts, "550 boom\x00nul") == "pending"

    message.refresh_from_db()
    assert message.last_error == message.log[-1]["error"] == "550 boom\ufffdnul"
