"""What an answer sends after commit: one message, its notifications first, then its runs'
recomputes (`escalations.tasks.answered`)."""

from unittest.mock import patch

import pytest
from django.test import TestCase

from escalations import tasks
from escalations.services import escalation_answer
from fleet.models import Delivery
from fleet.outbox import sending_held
from runs import tasks as work
from runs.models import FrontierChange, Task

pytestmark = pytest.mark.django_db


def enqueued(escalation, reviewer) -> tuple[list[tuple], list[tuple]]:
    """Answer, then run its after-commit callbacks; what went to the broker, as (answered
    messages, recompute messages)."""
    with TestCase.captureOnCommitCallbacks(execute=False) as callbacks:
        escalation_answer(escalation=escalation, reviewer=reviewer, text="Use the threshold")
    answered: list[tuple] = []
    recomputes: list[tuple] = []
    with (
        patch.object(tasks.answered, "delay", side_effect=lambda *a: answered.append(a)),
        patch.object(work.recompute, "delay", side_effect=lambda *a, **k: recomputes.append(a)),
    ):
        for callback in callbacks:
            callback()
    return answered, recomputes


def test_an_answer_sends_one_message_its_notifications_then_its_runs_recompute(
    hooked, receiver, desk, alice
):
    escalation = desk.escalate()
    receiver.received.clear()

    answered, recomputes = enqueued(escalation, alice)

    assert len(answered) == 1 and recomputes == []
    delivery_ids, run_ids = answered[0]
    types = [Delivery.objects.get(pk=pk).type for pk in delivery_ids]
    assert types == ["task.reframed", "escalation.answered"]  # the agent's first
    assert run_ids == [escalation.run_id]
    assert FrontierChange.objects.filter(run_id=escalation.run_id).exists()

    tasks.answered(delivery_ids, run_ids)

    assert [r.type for r in receiver.received][:2] == ["task.reframed", "escalation.answered"]
    assert not FrontierChange.objects.filter(run_id=escalation.run_id).exists()  # caught up
    plan = Task.objects.get(run_id=escalation.run_id, key="plan")
    assert plan.ready and plan.state == "pending"
    ready = Delivery.objects.filter(type="task.ready").latest("pk")
    assert ready.payload["data"]["task"] == "plan" and ready.pk > max(delivery_ids)


def test_while_sending_is_held_an_answer_still_has_its_run_recomputed(hooked, desk, alice):
    escalation = desk.escalate()

    with sending_held():
        answered, recomputes = enqueued(escalation, alice)

    assert answered == []
    assert [message[0] for message in recomputes] == [escalation.run_id]
    assert Delivery.objects.filter(type="task.reframed", attempts=0).exists()  # left for later


def test_an_answer_to_a_fleet_without_a_callback_still_has_its_run_recomputed(desk, alice):
    escalation = desk.escalate()
    desk.fleet.callback_url = ""
    desk.fleet.save()

    answered, recomputes = enqueued(escalation, alice)

    assert answered == []
    assert [message[0] for message in recomputes] == [escalation.run_id]
