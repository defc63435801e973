"""Story 1 (seeds/000): the all-green run as it happened, and replayed with containment on."""

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from escalations.models import Escalation
from fleet import services
from fleet.models import Event
from fleet.stories import all_green, play, recent
from runs.models import Attempt, Claim, Decision, Task
from tests.acceptance.conftest import api, fleet_for
from tests.conftest import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STORY = all_green.STORY


@pytest.fixture
def fleet(tmp_path):
    fleet = fleet_for(STORY, callback_url="http://127.0.0.1:9/unreachable")
    all_green.build_orders(tmp_path / "orders.sqlite3")
    services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(tmp_path / "orders.sqlite3")
    )
    return fleet


@pytest.fixture
def start():
    """The replay is played live: the server's clock runs with the story's minutes (it times
    live events by when it receives them), as in the demo."""
    return recent(STORY, timezone.now())


def radius(body: dict, key: str) -> dict:
    return next(c for c in body["claims"] if c["key"] == key)["blast_radius"]


def test_the_past_run_travelled_3_agents_4_prs_and_40_minutes(worker, client, fleet):
    all_green.ensure_imported_agents(fleet)
    out = io.StringIO()
    call_command("import_events", fleet.name, str(all_green.IMPORTED), stdout=out)
    assert json.loads(out.getvalue())["errors"] == []
    body = api(client, fleet, "/runs/tier-discounts")
    found = radius(body, "plan.customer-tier")
    assert (found["agents"], found["artifacts"], round(found["minutes"])) == (3, 4, 40)


def test_the_replay_refutes_the_claim_at_the_first_boundary_and_escalates_the_second_failure(
    worker, client, http, fleet, start
):
    play(fleet, STORY, range(all_green.REFUTED + 1), transport=http, start=start)
    # The invented column arrived unverified: posted without evidence, it gated the coders.
    posted = Event.objects.get(type="claim.posted", data__claim__key=all_green.CLAIM)
    assert (posted.response["status"], posted.response["reason"]) == (
        "unverified",
        "posted without evidence",
    )
    # The schema agent's query, re-run against the order database, refutes the invented column.
    eventually(lambda: Decision.objects.filter(task__key="plan", action="reframe").exists())
    reframe = Decision.objects.get(task__key="plan", action="reframe")
    assert all_green.REAL_COLUMNS[-1] in json.dumps(reframe.ground_truth)
    context = api(client, fleet, f"/runs/{all_green.RUN}/tasks/plan/context")
    assert context["decision"] == "reframe"
    assert "loyalty_points" in json.dumps(context["ground_truth"])

    play(
        fleet,
        STORY,
        range(all_green.REFUTED + 1, all_green.TIER_TABLE + 1),
        transport=http,
        start=start,
    )
    # No coder started on the bad plan.
    assert not Attempt.objects.filter(task__agent__name__startswith="coder").exists()
    body = api(client, fleet, f"/runs/{all_green.RUN}")
    found = radius(body, all_green.CLAIM)
    assert (found["agents"], found["artifacts"], round(found["minutes"])) == (1, 0, 2)

    # The reframed plan's claim is refuted too: two differently prompted failures agree.
    eventually(lambda: Escalation.objects.filter(task__key="plan").exists())
    play(fleet, STORY, [len(STORY.steps) - 1], transport=http, start=start)
    escalation = Escalation.objects.get(task__key="plan")
    assert escalation.status == "open"
    packet = escalation.packet
    assert packet.smallest_unblocking_question == all_green.PACKET["smallest_unblocking_question"]
    for field in ("tried", "ruled_out", "options"):
        assert packet.content[field] == all_green.PACKET[field], field
    [evidence] = packet.content["evidence"]
    assert evidence["payload"]["rows"] == [[c] for c in all_green.REAL_COLUMNS]
    # Two differently prompted attempts failing the same way: the signal rule escalates.
    escalate = Decision.objects.get(task__key="plan", action="escalate")
    assert escalate.reason.startswith("Signal rule: attempts"), escalate.reason
    assert Task.objects.get(key="plan").state == "escalated"
    for coder_task in ("discount-resolver", "api-change"):
        task = next(t for t in body["tasks"] if t["key"] == coder_task)
        assert f"claim:{all_green.CLAIM}" in task["blockers"]


def test_the_schema_agents_select_1_confirms_nothing(worker, client, http, fleet):
    play(fleet, STORY, range(all_green.REFUTED + 1), transport=http)

    eventually(lambda: not Claim.objects.get(key=all_green.CARELESS).verification_pending)
    body = api(client, fleet, f"/runs/{all_green.RUN}")
    careless = next(c for c in body["claims"] if c["key"] == all_green.CARELESS)
    assert (careless["status"], careless["reason"]) == (
        "unverified",
        "reality matches its evidence, but the evidence does not mention "
        "customers.customer_tier: it bears on another question",
    )
    assert careless["subjects"] == ["customers.customer_tier"]


def test_the_reviewers_answer_reframes_the_planner_and_releases_the_coders(
    worker, client, http, fleet, start
):
    play(fleet, STORY, range(all_green.REFUTED + 1), transport=http, start=start)
    eventually(lambda: Decision.objects.filter(task__key="plan", action="reframe").exists())
    play(
        fleet,
        STORY,
        range(all_green.REFUTED + 1, all_green.TIER_TABLE + 1),
        transport=http,
        start=start,
    )
    eventually(lambda: Escalation.objects.filter(task__key="plan").exists())
    play(fleet, STORY, [len(STORY.steps) - 1], transport=http, start=start)
    escalation = Escalation.objects.get(task__key="plan")

    alice, _ = services.member_add(username="alice", fleet=fleet, role="reviewer")
    client.force_login(alice)
    page = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Where does a customer&#x27;s tier come from today" in page
    response = client.post(f"/escalations/{escalation.pk}/answer/", {"text": all_green.ANSWER})
    assert response.status_code == 302

    escalation.refresh_from_db()
    assert escalation.status == "answered"
    assert set(escalation.answer.released) >= {"plan", "discount-resolver", "api-change"}
    context = api(client, fleet, f"/runs/{all_green.RUN}/tasks/plan/context")
    assert context["decision"] == "reframe"
    assert all_green.ANSWER in json.dumps(context["ground_truth"])
    eventually(lambda: Task.objects.get(key="discount-resolver").ready)
    frontier = api(client, fleet, f"/runs/{all_green.RUN}/frontier")
    assert {"plan", "discount-resolver", "api-change"} <= set(frontier["ready"])
    # The refuted claim keeps its history; the answer now stands in its place.
    body = api(client, fleet, f"/runs/{all_green.RUN}")
    claims = {c["key"]: c for c in body["claims"]}
    assert claims[all_green.CLAIM]["status"] == "verified"
    assert claims[f"{all_green.CLAIM}@refuted-1"]["status"] == "refuted"
    assert claims[f"{all_green.CLAIM}@refuted-1"]["blast_radius"]["agents"] == 1
    assert claims[all_green.CLAIM]["posted_by"] == "reviewer:alice"  # the answer, in its place

    # The manager's report: the widest claim is the refuted one, named as its agent named it and
    # said to be replaced; the answer is not counted among the run's claims.
    carol, _ = services.member_add(username="carol", fleet=fleet, role="manager")
    client.force_login(carol)
    runs = client.get("/reports/runs.csv?days=all").content.decode().splitlines()
    [replay] = [row for row in csv.DictReader(runs) if row["run"] == all_green.RUN]
    agents_claims = [c for c in body["claims"] if not c["posted_by"].startswith("reviewer:")]
    assert int(replay["claims"]) == len(agents_claims) < len(body["claims"])
    assert replay["widest_claim"] == f"{all_green.CLAIM}@refuted-1"
    page = client.get("/reports/?days=all").content.decode()
    assert (
        f"<code>{all_green.CLAIM}</code> <small>(refuted; a reviewer's answer replaced it)" in page
    )
