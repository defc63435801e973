"""Data migrations of the work, run forward on rows written as the previous migration left them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("runs", "0010_indexes_a_look_up_reads_by")]
AFTER = [("runs", "0011_answers_posted_by_their_reviewer")]


@pytest.fixture(autouse=True)
def latest_after():
    """Leave the test database as every other test expects it: fully migrated."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def migrated(to):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(to)
    return executor.loader.project_state(to).apps


def test_answers_stored_before_are_posted_by_their_reviewer_and_agents_claims_stay_theirs():
    apps = migrated(BEFORE)
    Fleet, Agent = apps.get_model("fleet", "Fleet"), apps.get_model("fleet", "Agent")
    Run, Task = apps.get_model("runs", "Run"), apps.get_model("runs", "Task")
    Claim, Evidence = apps.get_model("runs", "Claim"), apps.get_model("runs", "Evidence")
    now = timezone.now()
    fleet = Fleet.objects.create(name="acme", callback_secret="whsec_x")
    agent = Agent.objects.create(fleet=fleet, name="planner")
    run = Run.objects.create(fleet=fleet, key="r", started_at=now, started_by=agent)
    task = Task.objects.create(run=run, key="plan", agent=agent, position=0, created_at=now)
    answer = Claim.objects.create(
        run=run, task=task, key="answer.escalation-1", statement="q — a", status="verified",
        posted_at=now, checked_at=now, checked_by="reviewer:alice",
    )  # fmt: skip
    Evidence.objects.create(
        claim=answer, role="check", kind="human_answer", source="reviewer:alice",
        payload_hash="sha256:" + "0" * 64, submitted_by="reviewer:alice", verdict="verified",
        verdict_reason="a reviewer's answer is itself a verified claim", created_at=now,
    )  # fmt: skip
    by_hand = Claim.objects.create(
        run=run, task=task, key="plan.tier", statement="`customers.tier`", status="refuted",
        posted_at=now, posted_by="agent:planner", checked_at=now, checked_by="reviewer:alice",
    )  # fmt: skip

    apps = migrated(AFTER)
    Claim = apps.get_model("runs", "Claim")
    assert Claim.objects.get(pk=answer.pk).posted_by == "reviewer:alice"
    assert Claim.objects.get(pk=by_hand.pk).posted_by == "agent:planner"
