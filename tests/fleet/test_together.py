"""Writes together: rows inserted in one statement are stored as the ORM stores them, and a
later insert names an earlier one's row (the answer's writes: tests/escalations/test_answer.py)."""

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import services
from fleet.models import Fleet
from fleet.together import Insert, Inserted, Update, together
from runs.models import Claim, Evidence, Run, Task
from tests.fleet.test_rows import claims, stored


def test_rows_written_together_are_stored_as_the_orm_stores_them(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    task = Task.objects.create(run=run, key="t1", agent=agent, position=0, created_at=now)
    ours, theirs = claims(run, task, "ours", now), claims(run, task, "orm", now)
    first = Insert(ours[:1])
    evidence = Evidence(claim_id=Inserted(first), kind="query_result", source="SELECT 1",  # type: ignore[misc]
                        payload_hash="sha256:ab", submitted_by="agent:coder", task_id=task.pk,
                        created_at=now, payload={"rows": [[1, None, "é ☃"]]})  # fmt: skip

    with CaptureQueriesContext(connection) as queries:
        together(first, Insert(ours[1:]), Insert([evidence]),
                 Update(Task, {"pk": task.pk}, {"title": "checked"}))  # fmt: skip
    Claim.objects.bulk_create(theirs)

    if connection.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    assert all(c.pk is not None and c._state.adding is False for c in ours)
    mine, orms = stored(Claim, [c.pk for c in ours]), stored(Claim, [c.pk for c in theirs])
    key = [f.attname for f in Claim._meta.concrete_fields].index("key")
    for row in (*mine, *orms):
        row[0] = row[key] = None  # their own keys
    assert mine == orms
    written = Evidence.objects.get(pk=evidence.pk)
    assert (written.claim_id, written.payload) == (ours[0].pk, {"rows": [[1, None, "é ☃"]]})
    assert Task.objects.get(pk=task.pk).title == "checked"


def test_an_update_changes_the_rows_the_orm_would(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    tasks = [
        Task.objects.create(run=run, key=f"t{n}", agent=agent, position=n, created_at=now,
                            finished_at=now if n % 2 else None)
        for n in range(6)
    ]  # fmt: skip
    chosen = [tasks[1].pk, tasks[2].pk, tasks[3].pk]
    first = Insert(claims(run, tasks[0], "ours", now)[:1])

    together(
        first,  # on PostgreSQL, with the updates in one statement
        Update(Task, {"pk__in": chosen, "finished_at__isnull": False, "run": run},
               {"title": "finished", "state": Task.State.SUCCEEDED, "agent": agent}),
        Update(Task, {"pk__in": chosen, "finished_at": None}, {"title": "not yet"}),
        Update(Task, {"pk__in": []}, {"title": "none"}),  # matches nothing: not written
    )  # fmt: skip

    titles = dict(Task.objects.values_list("key", "title"))
    assert titles == {"t0": "", "t1": "finished", "t2": "not yet", "t3": "finished", "t4": "",
                      "t5": ""}  # fmt: skip
    assert set(Task.objects.filter(state=Task.State.SUCCEEDED).values_list("key", flat=True)) == {
        "t1", "t3"
    }  # fmt: skip
    assert not Task.objects.filter(~Q(agent=agent)).exists()


def test_an_update_refuses_a_lookup_it_does_not_write() -> None:
    with pytest.raises(ValueError, match="'key__startswith'"):
        Update(Task, {"key__startswith": "t"}, {"title": "x"})
