"""When the retry policy escalates, Bulkhead drafts the packet from the attempts, shows it at once
and asks the agent only for the question; the agent's own packet replaces the draft."""

import pytest
from django.test import TestCase

from escalations import services
from escalations.models import FailurePacket
from fleet.models import ApiToken, Delivery
from runs.models import Decision
from tests.conftest import REFUSED_CALLBACK
from tests.escalations.desk import packet
from tests.escalations.drafting import (
    COLUMNS_QUERY,
    QUESTION,
    REAL_COLUMNS,
    escalated_by_the_policy,
    orders_database,
    submit,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk_callback_url():
    return REFUSED_CALLBACK


@pytest.fixture
def escalation(desk, fleet, tmp_path):
    orders_database(fleet, tmp_path)
    return escalated_by_the_policy(desk)


def requested() -> list[dict]:
    return [
        d.payload["data"] for d in Delivery.objects.filter(type="packet.requested").order_by("id")
    ]


def run_api(client, desk) -> dict:
    _, token = ApiToken.issue(desk.planner.agent)
    response = client.get("/api/v1/runs/tier-discounts", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return {t["key"]: t for t in response.json()["tasks"]}


def test_when_the_policy_escalates_bulkhead_drafts_the_packet_at_once(escalation):
    draft = escalation.packet
    assert draft.drafted and draft.smallest_unblocking_question == ""
    reframe, escalate = Decision.objects.filter(task__key="plan").order_by("id")
    assert (reframe.action, escalate.action) == ("reframe", "escalate")
    first, second = draft.content["tried"]
    assert first.startswith("Attempt 1 by planner (prompt prompt:v1, context context:v1) failed")
    assert f"Decision: reframe — {reframe.reason}" in first
    assert "prompt and context changed since attempt 1" in second
    assert f"Decision: escalate — {escalate.reason[:100]}" in second
    assert [r["hypothesis"] for r in draft.content["ruled_out"]] == [
        "`customers` has a `customer_tier` column",
        "Customer tiers are kept in `loyalty_tiers`",
    ]
    assert draft.content["ruled_out"][0]["how"].startswith(
        "claim plan.customer-tier: refuted by the verifier: re-ran the query on data source "
        "'orders': reality differs from the payload hash"
    )
    # The checked evidence: what reality gave when it refuted the two claims.
    columns, tiers = draft.content["evidence"]
    assert (columns["source"], columns["payload"]["rows"]) == (
        COLUMNS_QUERY,
        [[c] for c in REAL_COLUMNS],
    )
    assert tiers["payload"]["rows"] == []


def test_packet_requested_asks_only_for_the_question(escalation):
    [asked] = requested()
    assert asked["missing"] == ["smallest_unblocking_question"]
    assert asked["draft"] == escalation.packet.content
    assert asked["escalation"] == escalation.pk and asked["agent"] == "planner"
    [opened] = [d.payload["data"] for d in Delivery.objects.filter(type="escalation.opened")]
    assert opened["drafted"] is True and opened["question"] is None


def test_the_packet_page_shows_the_draft_marked_as_bulkheads_at_once(escalation, browser):
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()

    assert "Drafted by Bulkhead from the attempts." in page
    assert '<h1 id="question">No question yet</h1>' in page
    assert '<p class="reason" id="reason">Signal rule: attempts 1 and 2' in page
    assert "It asked planner for the smallest unblocking question;" in page
    assert "As Bulkhead drafted it" in page and "Attempts Bulkhead recorded" in page
    assert "Attempt 2 by planner (prompt prompt:v2" in page
    # Its evidence was re-checked (inline here): verified, with the rows reality gave.
    assert page.count('<span class="badge badge-verified">verified</span>') == 2
    assert "<td>loyalty_points</td>" in page and "What the re-check read" in page
    queue = browser.get("/escalations/").content.decode()
    assert "Drafted by Bulkhead, waiting for the agent's question" in queue


def test_the_question_alone_sent_again_changes_nothing_and_another_replaces_it(escalation, desk):
    assert submit(desk, {"smallest_unblocking_question": QUESTION}).json()["packet"] == "filled"
    again = submit(desk, {"smallest_unblocking_question": QUESTION})  # a new webhook-id
    assert again.status_code == 202, again.content
    assert again.json()["packet"] == "unchanged"
    other = "Which tier column should the discount read?"
    replaced = submit(desk, {"smallest_unblocking_question": other})
    assert replaced.status_code == 202, replaced.content
    assert replaced.json()["packet"] == "replaced"
    escalation.refresh_from_db()
    own = escalation.packet
    assert own.smallest_unblocking_question == other
    assert own.from_draft == ["task", "tried", "ruled_out", "evidence"]


def test_the_agent_may_answer_with_the_question_alone(escalation, desk, browser):
    draft = escalation.packet
    response = submit(desk, {"smallest_unblocking_question": QUESTION})

    assert response.status_code == 202, response.content
    assert response.json()["packet"] == "filled"
    escalation.refresh_from_db()
    own = escalation.packet
    assert not own.drafted and own.smallest_unblocking_question == QUESTION
    assert own.from_draft == ["task", "tried", "ruled_out", "evidence"]
    for field in ("tried", "ruled_out", "evidence"):
        assert own.content[field] == draft.content[field], field
    assert not requested()[1:], "asked once"
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert f'<h1 id="question">{QUESTION.replace(chr(39), "&#x27;")}</h1>' in page
    assert "planner sent the question; task, tried, ruled_out, evidence are Bulkhead" in page


def test_the_agents_own_packet_replaces_the_draft_which_stays_in_the_history(
    escalation, desk, browser
):
    response = submit(desk, packet("plan"))

    assert response.status_code == 202, response.content
    escalation.refresh_from_db()
    assert not escalation.packet.drafted and escalation.packet.from_draft == []
    assert escalation.packet.content["tried"] == packet("plan")["tried"]
    assert FailurePacket.objects.filter(task__key="plan", drafted=True).count() == 1
    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Drafted by Bulkhead from the attempts." not in page
    assert "As the agent says" in page and "Attempts Bulkhead recorded" in page
    assert "packet drafted by Bulkhead from the attempts" in page  # the history


def test_an_agent_answering_with_evidence_of_its_own_keeps_the_drafts_tried(escalation, desk):
    mine = packet("plan")
    del mine["tried"], mine["ruled_out"]
    response = submit(desk, mine)

    assert response.status_code == 202, response.content
    escalation.refresh_from_db()
    assert escalation.packet.from_draft == ["tried", "ruled_out"]
    assert escalation.packet.content["evidence"] == mine["evidence"]


def test_without_a_draft_a_packet_must_be_whole(desk):
    desk.planner.post(
        "task.started",
        {
            "run": "tier-discounts",
            "task": "plan",
            "attempt": {"prompt_hash": "p", "context_hash": "c"},
        },
    )
    response = submit(desk, {"smallest_unblocking_question": QUESTION})

    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["errors"]] == [
        "data.packet.task",
        "data.packet.tried",
        "data.packet.ruled_out",
        "data.packet.evidence",
    ]


def test_the_run_api_names_each_tasks_waiting_escalation(escalation, desk, client, alice):
    tasks = run_api(client, desk)
    assert tasks["plan"]["escalation"] == {
        "id": escalation.pk,
        "status": "open",
        "question": None,
        "drafted": True,
        "missing": ["smallest_unblocking_question"],
        "note": None,
        "joined": False,
    }
    assert tasks["discount-resolver"]["escalation"] is None

    assert submit(desk, {"smallest_unblocking_question": QUESTION}).status_code == 202
    assert run_api(client, desk)["plan"]["escalation"] == {
        "id": escalation.pk,
        "status": "open",
        "question": QUESTION,
        "drafted": False,
        "missing": [],
        "note": None,
        "joined": False,
    }

    with TestCase.captureOnCommitCallbacks(execute=True):
        services.escalation_return(
            escalation=escalation, reviewer=alice, field="tried", note="say what you grepped"
        )
    returned = run_api(client, desk)["plan"]["escalation"]
    assert (returned["status"], returned["missing"], returned["note"]) == (
        "returned",
        ["tried"],
        "tried: say what you grepped",
    )

    better = submit(desk, packet("plan", smallest_unblocking_question=QUESTION))
    assert better.json()["packet"] == "reopened"
    assert run_api(client, desk)["plan"]["escalation"]["status"] == "open"
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.escalation_answer(escalation=escalation, reviewer=alice, text="Add the column")
    assert run_api(client, desk)["plan"]["escalation"] is None  # answered: nothing waits


def test_a_draft_has_no_question_in_the_escalations_tasks_either(escalation, desk, client):
    _, token = ApiToken.issue(desk.planner.agent)
    body = client.get(
        f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert body["question"] is None
    assert [t["question"] for t in body["tasks"]] == [None]
