"""The due-time sweep on a real worker with an injected clock: at half time the assignee is
reminded, when overdue the escalation moves to the next tier, each once, though the worker is
SIGKILLed in between and every sweep is sent twice (two at once)."""

from datetime import timedelta

import pytest

from escalations import tasks
from escalations.models import EscalationStep, Message
from escalations.services import messages
from tests.conftest import committed, eventually
from tests.escalations.desk import member
from tests.escalations.routed import ChatReceiver, chat_receiver, due, pool, route

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat():
    yield from chat_receiver()


def said(chat: ChatReceiver, headline: str) -> list[str]:
    return [m for m in chat.messages() if m.startswith(headline)]


def sweep_twice(at) -> None:
    tasks.sweep_due.delay(at.isoformat())
    tasks.sweep_due.delay(at.isoformat())


def test_the_reminder_then_the_tier_change_happen_once_each_across_a_worker_kill(
    worker, desk, alice, chat
):
    bob = member("bob", desk.fleet)
    pool(desk.fleet, "planners", "alice")
    pool(desk.fleet, "seniors", "bob")
    route(desk.fleet, "planners", next_pool="seniors")
    due(desk.fleet, 60)
    committed(messages.channel_add, user=alice, kind="chat", target=chat.url + "/alice")
    committed(messages.channel_add, user=bob, kind="chat", target=chat.url + "/bob")
    escalation = desk.escalate()
    assert escalation.assignee == alice and escalation.tier == 1
    eventually(lambda: said(chat, "Assigned to you"), what="alice told it is hers")
    opened = escalation.opened_at

    sweep_twice(opened + timedelta(minutes=20))  # nothing is due yet
    sweep_twice(opened + timedelta(minutes=31))
    eventually(lambda: said(chat, "Reminder"), what="alice reminded at half time")
    reminded = EscalationStep.objects.get(escalation=escalation, kind="reminder")
    assert (reminded.tier, reminded.due_at) == (1, opened + timedelta(minutes=30))

    worker.kill()
    worker.restart()

    sweep_twice(opened + timedelta(minutes=31))  # the same time again: nothing new
    sweep_twice(opened + timedelta(minutes=61))
    eventually(lambda: said(chat, "Overdue: moved to you"), what="bob told it moved to him")
    sweep_twice(opened + timedelta(minutes=62))
    eventually(
        lambda: not Message.objects.filter(status="pending").exists(),
        what="every message sent",
    )
    escalation.refresh_from_db()
    assert (escalation.tier, escalation.assignee, escalation.pool.name) == (2, bob, "seniors")
    assert escalation.status == "open"  # overdue is never an answer, abort or denial
    steps = list(EscalationStep.objects.filter(escalation=escalation).values_list("kind", "tier"))
    assert sorted(steps) == [("reminder", 1), ("tier", 2)]
    assert len(said(chat, "Reminder")) == 1
    assert len(said(chat, "Overdue: moved to you")) == 1
    reasons = sorted(Message.objects.filter(escalation=escalation).values_list("reason", flat=True))
    assert reasons == ["assigned", "reminder", "tier"]
    assert [a.kind for a in escalation.assignments.all()] == ["routed", "tier"]
