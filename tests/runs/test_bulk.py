"""A batch's lookups read the rows it names, not the run's: however large the run has grown
since PostgreSQL last read its statistics (the results of a batch: tests/fleet/test_batch_claims.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import rows, services
from fleet.models import Fleet
from runs.bulk import claimed, tasks_named
from runs.models import Claim, Run, Task
from tests.plans import rows_read

pytestmark = pytest.mark.postgres

SIZE = 3_000


@pytest.fixture
def grown(fleet: Fleet) -> Run:
    """A run of SIZE tasks with a claim each, grown after its tables were last analyzed (empty)."""
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_task, runs_claim")
    tasks = [
        Task(run=run, key=f"t{n}", agent=agent, position=n, created_at=now) for n in range(SIZE)
    ]
    Task.objects.bulk_create(tasks)
    rows.insert(
        [
            Claim(run=run, task=t, key=f"k{n}", statement="s", posted_at=now)
            for n, t in enumerate(tasks)
        ]
    )
    return run


def test_the_tasks_named_are_read_one_by_one_on_the_runs_key(fleet: Fleet, grown: Run) -> None:
    pairs = {("r1", "t5"), ("r1", "t2999"), ("r1", "nope")}
    with CaptureQueriesContext(connection) as queries:
        found = tasks_named(fleet.pk, pairs, attempts=True)

    assert sorted((run, key) for run, key, *_ in found) == [("r1", "t2999"), ("r1", "t5")]
    assert rows_read(queries.captured_queries[-1]["sql"]) <= 10


def test_the_keys_claimed_are_read_one_by_one_on_the_runs_key(fleet: Fleet, grown: Run) -> None:
    with CaptureQueriesContext(connection) as queries:
        found = claimed({grown.pk}, {"k7", "k2999", "new"})

    assert found == {(grown.pk, "k7"), (grown.pk, "k2999")}
    assert rows_read(queries.captured_queries[-1]["sql"]) <= 10
