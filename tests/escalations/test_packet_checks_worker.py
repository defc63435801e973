"""The drafted packet and the packet's re-check with a real worker on PostgreSQL: the tier
thresholds story (fleet/stories/tier_thresholds.py) played over HTTP, as the demo plays it."""

import pytest

from escalations.models import Escalation, FailurePacket
from fleet import services
from fleet.stories import Step, Story, all_green, play, post, tier_thresholds
from runs.models import Decision
from tests.acceptance.conftest import Http, api, fleet_for
from tests.conftest import eventually
from tests.escalations.drafting import QUESTION, columns_evidence

pytestmark = [pytest.mark.postgres, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STORY = tier_thresholds.STORY


@pytest.fixture
def http() -> Http:
    return Http()


@pytest.fixture
def fleet(tmp_path):
    fleet = fleet_for(STORY)
    all_green.build_orders(tmp_path / "orders.sqlite3")
    all_green.build_workspace(tmp_path / "pricing")
    services.source_add(
        fleet=fleet, kind="datasource", name="orders", value=str(tmp_path / "orders.sqlite3")
    )
    services.source_add(
        fleet=fleet, kind="workspace", name="pricing", value=str(tmp_path / "pricing")
    )
    return fleet


def checked(packet_id: int) -> FailurePacket:
    eventually(
        lambda: not FailurePacket.objects.get(pk=packet_id).checks_pending,
        what="the worker to re-check the packet's evidence",
    )
    return FailurePacket.objects.get(pk=packet_id)


def escalated(fleet, http) -> Escalation:
    play(fleet, STORY, range(tier_thresholds.REFUTED + 1), transport=http)
    eventually(lambda: Decision.objects.filter(action="reframe").exists())
    play(
        fleet,
        STORY,
        range(tier_thresholds.REFUTED + 1, tier_thresholds.ESCALATED + 1),
        transport=http,
    )
    eventually(lambda: Escalation.objects.filter(task__key="find-thresholds").exists())
    return Escalation.objects.select_related("packet").get(task__key="find-thresholds")


def test_the_worker_re_checks_the_drafted_packets_evidence(worker, client, http, fleet):
    escalation = escalated(fleet, http)
    draft = escalation.packet
    assert draft.drafted and len(draft.content["tried"]) == 2
    assert [r["hypothesis"] for r in draft.content["ruled_out"]] == [
        "`silver_threshold` in `pricing-config.yaml` is 500 loyalty points",
        "`customers` keeps the silver tier in a `tier` column",
    ]
    draft = checked(draft.pk)
    assert [c["status"] for c in draft.checks] == ["verified", "verified", "verified"]
    gold, lines, columns = draft.checks
    assert gold["payload"]["text"] == "  gold_threshold: 1000"
    assert "silver" not in lines["payload"]["text"]
    assert columns["payload"]["rows"] == [[c] for c in all_green.REAL_COLUMNS]

    found = api(client, fleet, f"/runs/{tier_thresholds.RUN}")
    task = next(t for t in found["tasks"] if t["key"] == "find-thresholds")
    assert task["escalation"] == {
        "id": escalation.pk,
        "status": "open",
        "question": None,
        "drafted": True,
        "missing": ["smallest_unblocking_question"],
        "note": None,
        "joined": False,
    }


def test_the_worker_refutes_an_agents_evidence_and_keeps_what_reality_gave(
    worker, client, http, fleet
):
    escalation = escalated(fleet, http)
    made_up = columns_evidence(all_green.COLUMNS_QUERY, [*all_green.REAL_COLUMNS, "tier"])
    # The planner answers with its question and evidence of its own, made up.
    reply = play_packet(
        fleet,
        http,
        {"smallest_unblocking_question": QUESTION, "evidence": [made_up]},
    )
    assert reply.status == 202, reply.body
    escalation.refresh_from_db()
    own = checked(escalation.packet_id)
    assert not own.drafted and own.from_draft == ["task", "tried", "ruled_out"]
    [refuted] = own.checks
    assert refuted["status"] == "refuted"
    assert refuted["payload"]["rows"] == [[c] for c in all_green.REAL_COLUMNS]
    body = api(client, fleet, f"/escalations/{escalation.pk}")
    assert body["checks"][0]["status"] == "refuted" and body["question"] == QUESTION


def play_packet(fleet, http, packet):
    step = Step(
        "planner",
        "packet.submitted",
        6,
        {"run": tier_thresholds.RUN, "task": "find-thresholds", "packet": packet},
    )
    story = Story(name="tier-thresholds-packet", title="", agents=STORY.agents, steps=(step,))
    return post(fleet, story, 0, step, http)
