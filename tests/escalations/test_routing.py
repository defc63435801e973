"""Routing a new escalation to a pool, the pool's turn, away reviewers, due times and urgency,
handing off, and the queue's "mine", "my pools" and "unassigned"."""

from datetime import timedelta

import pytest

from escalations.models import Assignment, Escalation
from escalations.services import routing
from fleet.errors import Refusal
from fleet.stories import story_clock
from tests.escalations.desk import member
from tests.escalations.routed import due, pool, route


@pytest.fixture
def people(fleet):
    return {name: member(name, fleet) for name in ("alice", "bob", "carol")}


def test_assignment_rotates_across_a_pool(desk, people):
    pool(desk.fleet, "planners", "alice", "bob", "carol")
    route(desk.fleet, "planners")
    assigned = []
    for n in range(4):
        desk.run(f"run-{n}")
        assigned.append(desk.escalate(run=f"run-{n}").assignee.get_username())
    assert assigned == ["alice", "bob", "carol", "alice"]


def test_a_reviewer_who_is_away_is_skipped(desk, people):
    pool(desk.fleet, "planners", "alice", "bob")
    route(desk.fleet, "planners")
    routing.reviewer_set_away(user=people["alice"], away=True)
    assert desk.escalate().assignee == people["bob"]
    routing.reviewer_set_away(user=people["bob"], away=True)
    desk.run("two")
    nobody = desk.escalate(run="two")
    assert nobody.assignee is None and nobody.pool.name == "planners"
    note = nobody.assignments.get().note
    assert "every reviewer in it is away" in note


def test_a_pool_reminder_is_not_sent_to_reviewers_who_are_away(desk, people):
    """Nobody was free when it came in; at half time the reminder goes to whoever is back,
    never to those still away (before, everyone in the pool got it)."""
    for name in ("alice", "bob"):
        people[name].email = f"{name}@example.com"
        people[name].save(update_fields=["email"])
        routing.reviewer_set_away(user=people[name], away=True)
    pool(desk.fleet, "planners", "alice", "bob")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    escalation = desk.escalate()
    assert escalation.assignee is None
    routing.reviewer_set_away(user=people["bob"], away=False)

    assert routing.sweep(escalation.opened_at + timedelta(minutes=40))["reminder"] == 1

    reminded = escalation.messages.filter(reason="reminder").values_list("target", flat=True)
    assert list(reminded) == ["bob@example.com"]


def test_a_pool_reminder_when_everyone_is_away_reaches_nobody_and_says_so(desk, people):
    people["alice"].email = "alice@example.com"
    people["alice"].save(update_fields=["email"])
    routing.reviewer_set_away(user=people["alice"], away=True)
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    escalation = desk.escalate()

    routing.sweep(escalation.opened_at + timedelta(minutes=40))

    assert not escalation.messages.filter(reason="reminder").exists()
    [step] = escalation.steps.all()
    assert (step.reached, step.note) == (0, "reached nobody: everyone in the pool is away")


def test_rules_route_by_what_the_escalation_is_about(desk, people):
    pool(desk.fleet, "coders", "bob")
    pool(desk.fleet, "planners", "carol")
    route(desk.fleet, "coders", agent_role="coding")
    route(desk.fleet, "planners", run="tier-discounts")
    escalation = desk.escalate()  # the planner's task, in run tier-discounts
    assert (escalation.pool.name, escalation.assignee.get_username()) == ("planners", "carol")
    routed = escalation.assignments.get()
    assert routed.kind == Assignment.Kind.ROUTED
    assert routed.note == (
        "Routed to pool planners (matched run tier-discounts); assigned to its least recently "
        "assigned reviewer, carol."
    )


def test_no_matching_rule_leaves_it_unassigned(desk, people):
    pool(desk.fleet, "coders", "bob")
    route(desk.fleet, "coders", agent_role="coding")
    escalation = desk.escalate()
    assert escalation.assignee is None and escalation.pool is None


def test_due_time_by_urgency_or_the_default(desk, people):
    due(desk.fleet, 240)
    due(desk.fleet, 30, urgency="high")
    plain = desk.escalate()
    assert plain.due_at == plain.opened_at + timedelta(minutes=240)
    desk.run("urgent")
    urgent = desk.escalate(run="urgent", urgency="high")
    assert urgent.urgency == "high"
    assert urgent.due_at == urgent.opened_at + timedelta(minutes=30)
    assert urgent.packet.content["urgency"] == "high"


def test_a_bad_urgency_is_a_422_naming_it(desk):
    desk.planner.post(
        "task.started",
        {
            "run": "tier-discounts",
            "task": "plan",
            "agent": "planner",
            "attempt": {"prompt_hash": "p1", "context_hash": "c1"},
        },
    )
    from tests.escalations.desk import packet

    response = desk.planner.post(
        "packet.submitted",
        {
            "run": "tier-discounts",
            "task": "plan",
            "agent": "planner",
            "packet": packet(urgency="urgent!"),
        },
    )
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "loc": "data.packet.urgency",
            "msg": "is 'urgent!'; urgency is one of low, normal or high (or leave it out)",
        }
    ]
    assert not Escalation.objects.exists()


def test_a_reviewer_hands_an_escalation_off_with_a_note(desk, people):
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    escalation = desk.escalate()
    routing.escalation_hand_off(
        escalation=escalation, by=people["alice"], to="bob", note="Bob knows the pricing config"
    )
    escalation.refresh_from_db()
    assert escalation.assignee == people["bob"]
    history = [(a.kind, a.to_user.get_username(), a.note) for a in escalation.assignments.all()]
    assert history[1] == ("handed-off", "bob", "Bob knows the pricing config")


def test_a_hand_off_by_the_reviewer_holding_the_claim_gives_the_claim_up(desk, people):
    """The new assignee can answer at once, not once the old claim expires."""
    from escalations.services import escalation_answer, escalation_claim
    from tests.conftest import committed

    escalation = desk.escalate()
    escalation_claim(escalation=escalation, reviewer=people["alice"])
    routing.escalation_hand_off(
        escalation=escalation, by=people["alice"], to="bob", note="Bob knows the pricing config"
    )
    escalation.refresh_from_db()
    assert (escalation.status, escalation.claimed_by, escalation.assignee) == (
        "open",
        None,
        people["bob"],
    )
    committed(escalation_answer, escalation=escalation, reviewer=people["bob"], text="points")
    escalation.refresh_from_db()
    assert escalation.status == "answered"


def test_a_hand_off_while_another_reviewer_holds_the_claim_is_refused(desk, people):
    """Before, bob handed alice's claimed escalation to carol, who was told 'Handed to you' and
    then refused when she tried to act: alice was still at work on it."""
    from escalations.services import escalation_claim

    member("carol", desk.fleet)
    escalation = desk.escalate()
    escalation_claim(escalation=escalation, reviewer=people["alice"])
    with pytest.raises(Refusal, match=r"^Claimed by alice until .*: ask them, or wait") as refused:
        routing.escalation_hand_off(escalation=escalation, by=people["bob"], to="carol", note="x")
    assert refused.value.status == 409
    escalation.refresh_from_db()
    assert escalation.claimed_by == people["alice"]
    assert not escalation.assignments.filter(kind="handed-off").exists()


@pytest.mark.parametrize(
    ("to", "note", "expected"),
    [
        (
            "mallory",
            "over to you",
            [{"loc": "to", "msg": "'mallory' is not a reviewer of fleet acme"}],
        ),
        ("bob", "  ", [{"loc": "note", "msg": "is required: say why you hand it off"}]),
        ("alice", "again", [{"loc": "to", "msg": "alice has it already"}]),
    ],
)
def test_a_hand_off_is_refused_saying_why(desk, people, to, note, expected):
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    escalation = desk.escalate()
    with pytest.raises(Refusal) as refused:
        routing.escalation_hand_off(escalation=escalation, by=people["alice"], to=to, note=note)
    assert refused.value.errors == expected
    assert escalation.assignments.count() == 1


def test_a_manager_is_not_a_hand_off_target(desk, people):
    member("dana", desk.fleet, role="manager")
    escalation = desk.escalate()
    with pytest.raises(Refusal, match="'dana' is not a reviewer of fleet acme"):
        routing.escalation_hand_off(escalation=escalation, by=people["alice"], to="dana", note="x")


def test_the_queue_filters_mine_my_pools_and_unassigned(desk, people, client):
    pool(desk.fleet, "planners", "alice", "bob")
    route(desk.fleet, "planners", agent_role="planning")
    first = desk.escalate()  # alice
    desk.run("two")
    second = desk.escalate(run="two")  # bob
    desk.run("three", tasks=[{"key": "docs", "agent": "coder"}])
    third = desk.escalate("docs", run="three")  # no rule for coding: unassigned
    client.force_login(people["alice"])

    def ids(params: str) -> set[int]:
        page = client.get(f"/escalations/?{params}")
        assert page.status_code == 200
        return {e.pk for e in (first, second, third) if f'id="esc-{e.pk}"' in page.content.decode()}

    assert ids("assigned=mine") == {first.pk}
    assert ids("assigned=pools") == {first.pk, second.pk}
    assert ids("assigned=unassigned") == {third.pk}
    assert ids("") == {first.pk, second.pk, third.pk}
    assert ids("assigned=nonsense") == {first.pk, second.pk, third.pk}  # a stale link still opens
    client.force_login(people["carol"])  # in no pool
    assert ids("assigned=pools") == set()


def test_my_pools_reads_no_escalation_for_a_reviewer_in_no_pool(desk, people, client):
    """Nothing can be in her pools: no escalation is read to find that out."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners", agent_role="planning")
    desk.escalate()
    client.force_login(people["carol"])

    with CaptureQueriesContext(connection) as queries:
        page = client.get("/escalations/?assigned=pools")

    assert page.status_code == 200
    assert 'id="esc-' not in page.content.decode()
    read = [
        q["sql"] for q in queries.captured_queries if 'FROM "escalations_escalation"' in q["sql"]
    ]
    assert read == []


def test_configuration_is_refused_saying_why(fleet, people):
    with pytest.raises(Refusal, match="mallory is not a reviewer of fleet acme"):
        pool(fleet, "p", "alice", "mallory")
    pool(fleet, "p", "alice")
    with pytest.raises(Refusal, match="fleet acme has no pool 'nope'"):
        route(fleet, "nope")
    with pytest.raises(Refusal, match="'oops' is not one of transient"):
        route(fleet, "p", failure_kind="oops")
    with pytest.raises(Refusal, match="not both"):
        due(fleet, 10, failure_kind="reasoning", urgency="high")
    with pytest.raises(Refusal, match="'soon' is not one of low, normal, high"):
        due(fleet, 10, urgency="soon")


def test_overdue_at_the_last_tier_goes_to_the_managers_and_stays_overdue(desk, people, client):
    dana = member("dana", desk.fleet, role="manager")
    pool(desk.fleet, "planners", "alice")
    route(desk.fleet, "planners")
    due(desk.fleet, 60)
    escalation = desk.escalate()
    opened = escalation.opened_at
    assert routing.sweep(opened + timedelta(minutes=10)) == {"reminder": 0, "tier": 0}
    assert routing.sweep(opened + timedelta(minutes=45)) == {"reminder": 1, "tier": 0}
    assert routing.sweep(opened + timedelta(minutes=46)) == {"reminder": 0, "tier": 0}
    assert routing.sweep(opened + timedelta(hours=3)) == {"reminder": 0, "tier": 1}
    assert routing.sweep(opened + timedelta(days=30)) == {"reminder": 0, "tier": 0}
    escalation.refresh_from_db()
    assert (escalation.tier, escalation.assignee, escalation.pool) == (2, None, None)
    assert escalation.next_step_at is None and escalation.status == "open"
    assert escalation.assignments.last().note == "Overdue at tier 1: moved to the fleet's managers."
    client.force_login(dana)
    with story_clock(opened + timedelta(hours=3)):
        page = client.get("/escalations/?assigned=pools").content.decode()
    assert f'id="esc-{escalation.pk}"' in page
    assert "managers" in page and "badge-overdue" in page
    packet = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Assigned to the fleet's managers" in packet
    assert "overdue: tier 2" in packet and "reminder (tier 1)" in packet


def test_the_api_says_whom_it_is_assigned_to_and_by_when(desk, people, client):
    from fleet.models import ApiToken

    token = ApiToken.issue(desk.planner.agent)[1]
    pool(desk.fleet, "planners", "bob")
    route(desk.fleet, "planners")
    due(desk.fleet, 45)
    escalation = desk.escalate()
    body = client.get(
        f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert (body["assigned_to"], body["tier"], body["overdue"]) == ("bob", 1, False)
    from datetime import datetime

    assert abs(datetime.fromisoformat(body["due_at"]) - escalation.due_at) < timedelta(seconds=1)
    with story_clock(escalation.due_at):
        later = client.get(
            f"/api/v1/escalations/{escalation.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
        ).json()
    assert later["overdue"] is True
