"""One event's look-up of its task reads the task's own rows, not its run's: a claim posted, a
task started and finished in a run grown since PostgreSQL last read its statistics."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Agent, Fleet
from runs import task_state
from runs.claims.posting import claim_post
from runs.models import Run, Task
from runs.specs import ClaimSpec, Outcome
from tests.plans import rows_read

pytestmark = pytest.mark.postgres


def look_up(queries: CaptureQueriesContext) -> str:
    """The event's first statement of its own: its task, with its run, agent and facts."""
    return next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT"))


def test_a_claim_reads_its_task_not_the_run(grown: Run) -> None:
    coder = Agent.objects.get(name="coder")
    with CaptureQueriesContext(connection) as queries:
        claim_post(actor=coder, at=timezone.now(), run="r1", task="t2500",
                   claim=ClaimSpec(key="new", statement="the column exists"))  # fmt: skip

    assert rows_read(look_up(queries)) <= 10


def test_a_start_and_a_finish_read_their_task_not_the_run(fleet: Fleet, grown: Run) -> None:
    coder = Agent.objects.get(name="coder")
    Task.objects.filter(run=grown, key="t2500").update(ready=True)
    now = timezone.now()
    started = task_state.task_start(actor=coder, at=now, run="r1", task="t2500",
                                    prompt_hash="p", context_hash="c")  # fmt: skip
    assert started["attempt"] == 1

    with CaptureQueriesContext(connection) as queries:
        task_state.task_start(actor=coder, at=now, run="r1", task="t2501",
                              prompt_hash="p", context_hash="c")  # fmt: skip
    assert rows_read(look_up(queries)) <= 10

    with CaptureQueriesContext(connection) as queries:
        task_state.task_finish(actor=coder, at=now + timedelta(seconds=1), run="r1",
                               task="t2500", outcome=Outcome(outcome="succeeded"))  # fmt: skip
    assert rows_read(look_up(queries)) <= 10
    assert Task.objects.get(run=grown, key="t2500").state == Task.State.SUCCEEDED
