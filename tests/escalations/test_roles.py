"""Roles: a fleet's reviewers act on its escalations; its managers read the queue and the packets."""

import pytest
from django.test import Client, TestCase

from escalations.models import Answer, Escalation
from fleet import services
from runs.models import Claim, Decision, Run, Task
from tests.conftest import signed_in
from tests.escalations.desk import HASH, Desk, member

pytestmark = pytest.mark.django_db

REFUSAL = "Only a reviewer of fleet acme can act on its escalations"


def test_a_manager_reads_the_packet_with_a_note_instead_of_the_actions(desk, carol):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": "plan.tier",
                "statement": "tier exists",
                "evidence": {"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH},
            },
        },
    )
    escalation = desk.escalate()
    response = signed_in(carol).get(f"/escalations/{escalation.pk}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "You are a manager of fleet acme: you can read this packet" in page
    assert "Tried" in page and "tier exists" in page  # the packet itself is all there
    for action in ("Answer and release", "Claim it", "Other actions", "Re-check", "Abort"):
        assert action not in page, action
    assert "No reviewer has claimed it" in page


def test_a_manager_sees_the_queue_without_claim_buttons_and_a_reviewer_with_them(
    desk, carol, fleet
):
    escalation = desk.escalate()
    row = f'id="esc-{escalation.pk}"'
    read = signed_in(carol).get("/escalations/").content.decode()
    assert row in read and f"/escalations/{escalation.pk}/claim/" not in read
    alice = member("alice", fleet)
    acting = signed_in(alice).get("/escalations/").content.decode()
    assert f"/escalations/{escalation.pk}/claim/" in acting


def test_a_managers_reading_is_not_the_first_look(desk, carol):
    escalation = desk.escalate()
    signed_in(carol).get(f"/escalations/{escalation.pk}/")
    escalation.refresh_from_db()
    assert escalation.first_looked_at is None and escalation.packet_opened_at is None


ACTIONS = [
    ("claim", {}),
    ("claim", {"from": "packet"}),
    ("answer", {"text": "use loyalty points"}),
    ("reroute", {"agent": "coder", "note": "the coder can read the schema"}),
    ("return", {"field": "evidence", "note": "send the rows"}),
    ("abort", {"reason": "dropped"}),
]


@pytest.mark.parametrize(("action", "form"), ACTIONS)
def test_a_manager_is_refused_every_action_with_403_saying_why(desk, carol, action, form):
    escalation = desk.escalate()
    url = f"/escalations/{escalation.pk}/{action}/"
    with TestCase.captureOnCommitCallbacks(execute=True):
        plain = signed_in(carol).post(url, form)
        htmx = signed_in(carol).post(url, form, HTTP_HX_REQUEST="true")
    assert plain.status_code == 403 and htmx.status_code == 403
    page = plain.content.decode()
    assert REFUSAL in page and "bulkhead.css" in page  # the 403 page, not a bare body
    assert f'<a href="/escalations/{escalation.pk}/">Back to the escalation</a>' in page
    assert REFUSAL in htmx.content.decode()
    escalation.refresh_from_db()
    assert escalation.status == "open" and escalation.claimed_by is None
    assert not Answer.objects.exists() and not Decision.objects.filter(action="reroute").exists()
    assert Task.objects.get(key="plan").state == "escalated"
    assert Run.objects.get(key="tier-discounts").state == "running"


def test_a_manager_cannot_release_a_reviewers_claim(desk, carol, fleet):
    escalation = desk.escalate()
    signed_in(member("alice", fleet)).post(f"/escalations/{escalation.pk}/claim/")
    response = signed_in(carol).post(
        f"/escalations/{escalation.pk}/release/", HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 403 and REFUSAL in response.content.decode()
    assert Escalation.objects.get(pk=escalation.pk).claimed_by.username == "alice"


def test_a_manager_cannot_send_a_claim_to_the_verifier(desk, carol):
    desk.planner.post(
        "claim.posted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "claim": {
                "key": "plan.tier",
                "statement": "tier exists",
                "evidence": {"kind": "query_result", "source": "SELECT 1", "payload_hash": HASH},
            },
        },
    )
    escalation = desk.escalate()
    claim = Claim.objects.get(key="plan.tier")
    url = f"/escalations/{escalation.pk}/claims/{claim.pk}/recheck/"
    assert signed_in(carol).post(url).status_code == 403
    htmx = signed_in(carol).post(url, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 403 and REFUSAL in htmx.content.decode()
    assert not Claim.objects.get(pk=claim.pk).verification_pending


def test_the_role_is_per_fleet(desk, fleet):
    """A manager of acme who reviews globex acts on globex's escalations only."""
    dana = member("dana", fleet, role="manager")
    globex = services.fleet_create(name="globex")
    services.member_add(username="dana", fleet=globex, role="reviewer")
    other = Desk(Client(), globex)
    other.run()
    theirs = other.escalate()
    ours = desk.escalate()
    browser = signed_in(dana)
    assert browser.post(f"/escalations/{ours.pk}/claim/").status_code == 403
    assert browser.post(f"/escalations/{theirs.pk}/claim/").status_code == 302
    assert Escalation.objects.get(pk=theirs.pk).claimed_by == dana
