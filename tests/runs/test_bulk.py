"""A batch's lookups read the rows it names, not the run's: however large the run has grown
since PostgreSQL last read its statistics (the results of a batch: tests/fleet/test_batch_claims.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Fleet
from runs.bulk import claimed, tasks_named
from runs.models import Run
from tests.plans import rows_read

pytestmark = pytest.mark.postgres


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
