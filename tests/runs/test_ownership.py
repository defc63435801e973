"""An event reads its task's own rows, not its run's nor its fleet's: a claim posted, a task
started and finished in a run grown since PostgreSQL last read its statistics, each statement
of it (the look-up of the task with its facts first)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet.models import Agent, Fleet
from runs import task_state
from runs.claims.posting import claim_post
from runs.models import ClaimUse, Prerequisite, Run, Task
from runs.specs import ClaimSpec, EvidenceSpec, Outcome
from tests.plans import most_read, rows_read

pytestmark = pytest.mark.postgres


def look_up(queries: CaptureQueriesContext) -> str:
    """The event's first statement of its own: its task, with its run, agent and facts."""
    return next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT"))


def test_a_claim_reads_its_task_not_the_run(grown: Run) -> None:
    coder = Agent.objects.get(name="coder")
    evidence = EvidenceSpec(kind="query_result", source="SELECT tier FROM customers",
                            payload_hash="sha256:" + "ab" * 32)  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        posted = claim_post(actor=coder, at=timezone.now(), run="r1", task="t2500",
                            claim=ClaimSpec(key="new", statement="`customers.tier` exists",
                                            evidence=evidence))  # fmt: skip

    assert posted["claim"] == "new"
    assert rows_read(look_up(queries)) <= 10
    assert most_read(queries)[0] <= 10, most_read(queries)


def test_a_start_and_a_finish_read_their_task_not_the_run(fleet: Fleet, grown: Run) -> None:
    coder = Agent.objects.get(name="coder")
    Task.objects.filter(run=grown, key__in=["t2500", "t2501", "t2502"]).update(ready=True)
    # t2501 consumes t2500's claim by depending on it, t2502 names two claims of the run
    tasks = {t.key: t for t in Task.objects.filter(run=grown, key__in=["t2500", "t2501"])}
    Prerequisite.objects.create(task=tasks["t2501"], requires=tasks["t2500"])
    Task.objects.filter(run=grown, key="t2502").update(consumes=["k7", "k2999"],
                                                      consumes_declared=True)  # fmt: skip
    now = timezone.now()
    started = task_state.task_start(actor=coder, at=now, run="r1", task="t2500",
                                    prompt_hash="p", context_hash="c")  # fmt: skip
    assert started["attempt"] == 1

    with CaptureQueriesContext(connection) as queries:
        started = task_state.task_start(actor=coder, at=now, run="r1", task="t2501",
                                        prompt_hash="p", context_hash="c")  # fmt: skip
    assert started["attempt"] == 1
    assert rows_read(look_up(queries)) <= 10
    assert most_read(queries)[0] <= 10, most_read(queries)
    with CaptureQueriesContext(connection) as queries:
        task_state.task_start(actor=coder, at=now, run="r1", task="t2502",
                              prompt_hash="p", context_hash="c")  # fmt: skip
    assert most_read(queries)[0] <= 10, most_read(queries)
    used = ClaimUse.objects.filter(task__run=grown, task__key__in=["t2501", "t2502"])
    assert sorted(used.values_list("task__key", "claim__key")) == [
        ("t2501", "k2500"),
        ("t2502", "k2999"),
        ("t2502", "k7"),
    ]

    with CaptureQueriesContext(connection) as queries:
        task_state.task_finish(actor=coder, at=now + timedelta(seconds=1), run="r1",
                               task="t2500", outcome=Outcome(outcome="succeeded"))  # fmt: skip
    assert rows_read(look_up(queries)) <= 10
    assert most_read(queries)[0] <= 10, most_read(queries)
    assert Task.objects.get(run=grown, key="t2500").state == Task.State.SUCCEEDED
