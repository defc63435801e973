"""A packet has a price: its evidence is re-checked like a claim's and shown with its facts, an
agent cannot cite another agent or a reviewer, nor send back a packet a reviewer returned."""

import pytest
from django.test import TestCase

from escalations import services
from escalations.models import Escalation, FailurePacket
from escalations.services import packet_checks
from fleet.models import ApiToken
from fleet.tasks import reconcile
from runs.claims.hashing import payload_hash
from tests.escalations.desk import HASH, packet
from tests.escalations.drafting import (
    COLUMNS_QUERY,
    QUESTION,
    REAL_COLUMNS,
    columns_evidence,
    escalated_by_the_policy,
    orders_database,
    submit,
)

pytestmark = pytest.mark.django_db

SEED_TASK = "Add tier-based discount to order service"
TEST_RUN = {"command": "pytest -q tests/test_discounts.py", "exit_code": 1, "output_sha256": "ab"}


@pytest.fixture
def orders(fleet, tmp_path):
    return orders_database(fleet, tmp_path)


def started(desk, task="plan"):
    response = desk.planner.post(
        "task.started",
        {
            "run": "tier-discounts",
            "task": task,
            "agent": desk.agent_of("tier-discounts", task),
            "attempt": {"prompt_hash": "p1", "context_hash": "c1"},
        },
    )
    assert response.status_code == 202, response.content


def errors(response) -> dict[str, str]:
    assert response.status_code == 422, response.content
    return {e["loc"]: e["msg"] for e in response.json()["errors"]}


# Refused: what an agent cannot hand over -----------------------------------------------------


def test_an_agent_citing_another_agent_is_refused_naming_the_item(desk):
    started(desk)
    evidence = [*packet()["evidence"], {"kind": "file_read", "source": "agent:schema said so",
                                       "payload_hash": HASH}]  # fmt: skip
    found = errors(submit(desk, packet(evidence=evidence)))

    assert list(found) == ["data.packet.evidence.1.source"]
    assert found["data.packet.evidence.1.source"].startswith(
        "cites another agent's text ('agent:schema said so'), which is not evidence"
    )
    assert not FailurePacket.objects.exists() and not Escalation.objects.exists()


def test_an_agent_making_up_a_reviewers_answer_is_refused_naming_the_item(desk):
    started(desk)
    answer = {"text": "use loyalty_points"}
    made_up = {
        "kind": "human_answer",
        "source": "reviewer:alice",
        "payload_hash": payload_hash(answer),
        "payload": answer,
    }
    found = errors(submit(desk, packet(evidence=[made_up])))

    assert list(found) == ["data.packet.evidence.0.kind"]
    assert "an agent cannot hand one over" in found["data.packet.evidence.0.kind"]
    assert not FailurePacket.objects.exists()


def test_the_seeds_packet_with_its_task_in_words_is_accepted(desk):
    started(desk)
    response = submit(desk, packet(SEED_TASK))

    assert response.status_code == 202, response.content
    stored = Escalation.objects.get(pk=response.json()["escalation"]).packet
    assert stored.task.key == "plan" and stored.content["task"] == SEED_TASK


def test_a_packet_naming_another_tasks_key_is_refused(desk):
    started(desk)
    found = errors(submit(desk, packet("api-change")))

    assert found == {
        "data.packet.task": "names task 'api-change', not 'plan': send the packet for the task "
        "it is about (its key or its description in words)"
    }


def returned(desk, alice, note="say which tier sources you searched"):
    escalation = desk.escalate()
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.escalation_return(escalation=escalation, reviewer=alice, field="tried", note=note)
    return escalation


@pytest.mark.parametrize(
    "again",
    [
        packet(),
        # The same packet, only trimmed differently and with its task in words.
        packet(
            SEED_TASK, smallest_unblocking_question=packet()["smallest_unblocking_question"] + " "
        ),
    ],
)
def test_a_packet_a_reviewer_returned_sent_back_unchanged_is_refused(desk, alice, again):
    escalation = returned(desk, alice)
    found = errors(submit(desk, again))

    assert found == {
        "data.packet": "is the packet a reviewer returned, unchanged; the return's note: "
        "'tried: say which tier sources you searched'. Change what the note asks for and send "
        "it again"
    }
    escalation.refresh_from_db()
    assert escalation.status == "returned"


def test_a_better_packet_after_a_return_reopens_it(desk, alice):
    escalation = returned(desk, alice)
    better = packet(tried=[*packet()["tried"], "Searched services/ and db/ for tier"])

    reply = submit(desk, better).json()
    assert (reply["escalation"], reply["packet"]) == (escalation.pk, "reopened")


# The re-check: verified, refuted or unverified, with the facts --------------------------------


def test_each_evidence_item_is_re_checked_and_shown_with_its_verdict_and_payload(
    desk, orders, browser
):
    started(desk)
    real = columns_evidence(COLUMNS_QUERY, REAL_COLUMNS)
    made_up = columns_evidence(COLUMNS_QUERY, [*REAL_COLUMNS, "customer_tier"])
    unreachable = {
        "kind": "test_run",
        "source": TEST_RUN["command"],
        "payload_hash": payload_hash(TEST_RUN),
        "payload": TEST_RUN,
    }
    response = submit(desk, packet(evidence=[real, made_up, unreachable]))
    assert response.status_code == 202, response.content

    stored = FailurePacket.objects.get()
    assert not stored.checks_pending
    verified, refuted, unverified = stored.checks
    assert verified["status"] == "verified"
    assert verified["payload"]["rows"] == [[c] for c in REAL_COLUMNS]
    assert (
        refuted["status"] == "refuted"
        and "reality differs from the payload hash" in (refuted["reason"])
    )
    assert refuted["payload"]["rows"] == [[c] for c in REAL_COLUMNS]  # the facts, not the claim
    assert (unverified["status"], unverified["reason"], unverified["payload"]) == (
        "unverified",
        "the command is not one of the fleet's allowed test commands (it must match one "
        "exactly), so it was not run",
        None,
    )

    page = browser.get(f"/escalations/{response.json()['escalation']}/").content.decode()
    assert '<span class="badge badge-verified">verified</span>' in page
    assert '<span class="badge badge-refuted">refuted</span>' in page
    assert '<span class="badge badge-unverified">unverified</span>' in page
    # Reality under each query, and the agent's differing copy under the refuted one.
    assert page.count("<td>loyalty_points</td>") == 3
    assert "<td>customer_tier</td>" in page  # the agent's copy, shown because it differs
    assert "As the agent sent it: it differs from what the re-check read" in page
    assert "exited with <strong>exit code 1</strong>" in page  # the agent's, not re-checked
    assert "so it was not run" in page  # why it stays unverified
    assert "As the agent sent it (the re-check could not read reality to compare)" in page


def test_the_careless_packet_is_accepted_but_pays_its_price_on_the_page(escalation_of, browser):
    escalation, desk = escalation_of
    careless = {
        "task": "plan",
        "tried": ["looked"],
        "ruled_out": [],
        "evidence": [{"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH,
                      "datasource": "orders"}],
        "smallest_unblocking_question": "Help?",
    }  # fmt: skip
    assert submit(desk, careless).status_code == 202

    page = browser.get(f"/escalations/{escalation.pk}/").content.decode()
    assert '<span class="badge badge-refuted">refuted</span>' in page
    assert "The agent lists 1 try; Bulkhead recorded 2 attempts." in page
    assert "Attempt 2 by planner" not in page.split("Attempts Bulkhead recorded")[0]


@pytest.fixture
def escalation_of(desk, orders):
    return escalated_by_the_policy(desk), desk


def test_a_lost_re_check_is_found_by_the_reconciler(desk, orders, monkeypatch):
    started(desk)
    monkeypatch.setattr(packet_checks, "check_after_commit", lambda packet: None)  # lost
    sent = submit(desk, packet(evidence=[columns_evidence(COLUMNS_QUERY, REAL_COLUMNS)]))
    assert sent.status_code == 202
    stored = FailurePacket.objects.get()
    assert stored.checks_pending and stored.checks == []

    with TestCase.captureOnCommitCallbacks(execute=True):
        counts = reconcile()

    assert counts["packet_checks"] == 1
    stored.refresh_from_db()
    assert not stored.checks_pending and stored.checks[0]["status"] == "verified"
    assert packet_checks.reenqueue(now=stored.submitted_at) == {"packet_checks": 0}


def test_the_escalation_api_gives_the_draft_and_the_checks(escalation_of, client):
    escalation, desk = escalation_of
    _, token = ApiToken.issue(desk.planner.agent)
    body = client.get(
        f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()

    assert body["drafted"] is True and body["question"] is None
    assert body["from_draft"] == [] and body["checks_pending"] is False
    assert [c["status"] for c in body["checks"]] == ["verified", "verified"]
    assert body["checks"][0]["payload"]["rows"] == [[c] for c in REAL_COLUMNS]
    assert submit(desk, {"smallest_unblocking_question": QUESTION}).status_code == 202
    body = client.get(
        f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert body["drafted"] is False and body["question"] == QUESTION
    assert body["from_draft"] == ["task", "tried", "ruled_out", "evidence"]
