"""A packet's look-up of the waiting escalation that asks the same question reads the packets
that ask it, not the fleet's queue: however long the queue has grown since PostgreSQL last read
its statistics (what joining does: tests/escalations/test_one_question.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from escalations.intake_sql import packet_facts
from escalations.models import Escalation, FailurePacket
from fleet import rows, services
from fleet.models import Fleet
from runs.models import Run, Task
from runs.ownership import run_and_task
from tests.plans import rows_read

pytestmark = pytest.mark.postgres

WAITING = 2_000


@pytest.fixture
def queue(fleet: Fleet) -> Run:
    """A run whose WAITING tasks each wait on an escalation asking its own question ("q<n>"),
    written after the escalations' tables were last analyzed (empty)."""
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE escalations_escalation, escalations_failurepacket")
    tasks = [
        Task(run=run, key=f"t{n}", agent=agent, position=n, created_at=now)
        for n in range(WAITING + 1)
    ]
    Task.objects.bulk_create(tasks)
    packets = [
        FailurePacket(task=t, agent=agent, content={}, question_key=f"q{n}", submitted_at=now)
        for n, t in enumerate(tasks[:WAITING])
    ]
    rows.insert(packets)
    rows.insert(
        [Escalation(fleet=fleet, run=run, task=p.task, packet=p, opened_at=now) for p in packets]
    )
    return run


def shared_escalation(fleet: Fleet, question_key: str) -> tuple[int | None, str]:
    """The escalation the last task's packet asking `question_key` would join, and the SQL."""
    facts = packet_facts(fleet_id=fleet.pk, question_key=question_key, dedup_key="", asks=True)
    with CaptureQueriesContext(connection) as queries:
        row = run_and_task(fleet.pk, "r1", f"t{WAITING}", related=("run__fleet",), **facts)
    return row.shared_escalation, queries.captured_queries[-1]["sql"]


def test_the_escalation_asking_the_same_is_found_by_its_packet(fleet: Fleet, queue: Run) -> None:
    asking = Escalation.objects.get(packet__question_key="q1234")

    found, sql = shared_escalation(fleet, "q1234")

    assert found == asking.pk
    assert rows_read(sql) <= 10


def test_a_question_no_one_asks_reads_no_escalation(fleet: Fleet, queue: Run) -> None:
    found, sql = shared_escalation(fleet, "asked by no one")

    assert found is None
    assert rows_read(sql) <= 10
