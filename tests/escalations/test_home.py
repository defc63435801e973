"""The first page after signing in says what is waiting and why."""

import pytest

from fleet import demo, services
from fleet.stories import all_green, hung_test_run, shared_question, tier_thresholds

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loaded(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    demo.load()


def test_it_says_what_waits_for_a_reviewer_and_why(client, loaded):
    user, _ = services.member_add(username="rita", fleet=demo.fleet_and_people(), role="reviewer")
    client.force_login(user)
    page = client.get("/").content.decode()

    assert "3 escalations wait for a reviewer" in page
    assert "<strong>4 tasks wait on their answers</strong>: 1 of them asked a question" in page
    assert "Where does a customer&#x27;s tier come from today" in page
    # The tier thresholds: the policy escalated and the planner sent no packet.
    assert "Bulkhead drafted the packet, the agent was asked for the question" in page
    assert "Why: Signal rule" in page
    assert "forge</strong> (demo) is down" in page and "It defers 4 tasks in 1 run" in page
    assert hung_test_run.RUN in page and "./mvnw test" in page


def test_it_counts_up_to_the_queues_cap(client, loaded, monkeypatch):
    """Past the cap it says so ("2+"), as the queue does, instead of counting every escalation."""
    from escalations.selectors import queue

    monkeypatch.setattr(queue, "COUNT_CAP", 2)
    user, _ = services.member_add(username="rita", fleet=demo.fleet_and_people(), role="reviewer")
    client.force_login(user)
    page = client.get("/").content.decode()

    assert "2+ escalations wait for a reviewer" in page
    assert "<strong>2+ tasks wait on their answers</strong>: 1 of them asked a question" in page
    assert "(2+ in all, oldest first)" not in page  # three shown: no more to say


def test_after_the_answers_nothing_waits(client, loaded):
    from escalations.models import Escalation
    from escalations.services import escalation_answer

    user, _ = services.member_add(username="rita", fleet=demo.fleet_and_people(), role="reviewer")
    for run in (all_green.RUN, tier_thresholds.RUN, shared_question.RUN):
        escalation = Escalation.objects.get(run__key=run)
        escalation_answer(escalation=escalation, reviewer=user, text=all_green.ANSWER, option="")
    client.force_login(user)
    page = client.get("/").content.decode()

    assert "No escalation waits for a reviewer" in page


def test_a_member_of_another_fleet_sees_none_of_it(client, loaded):
    other = services.fleet_create(name="elsewhere")
    user, _ = services.member_add(username="olga", fleet=other, role="reviewer")
    client.force_login(user)
    page = client.get("/").content.decode()

    assert "No escalation waits for a reviewer" in page
    assert "Every capability is up" in page and "No run has failed" in page


def test_it_asks_a_stranger_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
