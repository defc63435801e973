"""packet.submitted: a task has at most one waiting escalation, whatever the agent sends again."""

import pytest
from django.test import TestCase

from escalations import services
from escalations.models import Escalation, FailurePacket
from fleet.models import Delivery
from runs.models import Blocker, Task
from tests.conftest import REFUSED_CALLBACK
from tests.escalations.desk import Desk, packet

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url():
    return REFUSED_CALLBACK


def submit(desk: Desk, **changes):
    response = desk.planner.post(
        "packet.submitted",
        {"run": "tier-discounts", "task": "plan", "packet": packet("plan", **changes)},
    )
    assert response.status_code == 202, response.content
    return response.json()


def answer(escalation, reviewer, text="Use the loyalty_points threshold"):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return services.escalation_answer(escalation=escalation, reviewer=reviewer, text=text)


def opened_notifications() -> list[dict]:
    deliveries = Delivery.objects.filter(type="escalation.opened").order_by("id")
    return [d.payload["data"] for d in deliveries]


def assert_released(task_key: str = "plan") -> None:
    task = Task.objects.get(key=task_key)
    assert task.state == "pending" and task.ready
    assert not Blocker.objects.filter(
        task=task, code__startswith="escalation:", cleared_at=None
    ).exists()


def test_the_same_packet_sent_again_changes_nothing(desk, alice):
    escalation = desk.escalate()
    again = submit(desk)  # a new webhook-id: the agent retried
    assert again["escalation"] == escalation.pk and again["packet"] == "unchanged"
    assert Escalation.objects.count() == 1
    assert FailurePacket.objects.count() == 1
    assert len(opened_notifications()) == 1
    answer(escalation, alice)
    assert_released()


def test_a_new_packet_for_a_waiting_escalation_replaces_its_packet(desk, alice):
    escalation = desk.escalate()
    first = escalation.packet
    question = "Is the tier the loyalty_points threshold in pricing-config.yaml?"
    replaced = submit(desk, smallest_unblocking_question=question)
    assert (replaced["escalation"], replaced["packet"]) == (escalation.pk, "replaced")
    escalation.refresh_from_db()
    assert Escalation.objects.filter(task__key="plan").count() == 1
    assert escalation.status == "open"
    assert escalation.packet.smallest_unblocking_question == question
    # Both packets stay in the task's history.
    assert list(FailurePacket.objects.order_by("id")) == [first, escalation.packet]
    assert len(opened_notifications()) == 1
    answer(escalation, alice)
    escalation.refresh_from_db()
    assert escalation.status == "answered"
    assert_released()


def test_a_claimed_escalation_keeps_its_reviewer_when_the_packet_is_replaced(desk, alice):
    escalation = services.escalation_claim(escalation=desk.escalate(), reviewer=alice)
    submit(desk, smallest_unblocking_question="Is the tier in pricing-config.yaml?")
    escalation.refresh_from_db()
    assert (escalation.status, escalation.claimed_by) == ("claimed", alice)
    assert Escalation.objects.count() == 1


def test_a_better_packet_after_a_return_reopens_the_same_escalation(desk, alice):
    escalation = desk.escalate()
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.escalation_return(
            escalation=escalation, reviewer=alice, field="evidence", note="show the config file"
        )
    escalation.refresh_from_db()
    assert escalation.status == "returned"
    better = submit(desk, tried=["Read pricing-config.yaml", "Queried the customers table"])
    assert better["escalation"] == escalation.pk and better["packet"] == "reopened"
    escalation.refresh_from_db()
    assert Escalation.objects.count() == 1
    assert escalation.status == "open"
    assert escalation.claimed_by is None and escalation.acted_at is None
    assert escalation.packet.content["tried"][0] == "Read pricing-config.yaml"
    assert escalation.returned_reason == "evidence: show the config file"  # what was asked
    assert FailurePacket.objects.count() == 2
    reopened = opened_notifications()
    assert [n["reopened"] for n in reopened] == [False, True]
    assert reopened[1]["escalation"] == escalation.pk
    assert Task.objects.get(key="plan").state == "escalated"
    answer(escalation, alice)
    assert_released()


def test_a_packet_after_an_answer_opens_a_new_escalation(desk, alice):
    first = desk.escalate()
    answer(first, alice)
    # What the reframed attempt tried makes it a new packet (the same one again is refused:
    # tests/escalations/test_one_question.py).
    second = desk.escalate(tried=[*packet()["tried"], "Used the answer: billing has no tier"])
    assert second.pk != first.pk and second.status == "open"
    assert Escalation.objects.filter(status__in=Escalation.OPEN_STATES).count() == 1
