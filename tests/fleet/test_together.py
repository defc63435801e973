"""Writes together: rows inserted in one statement are stored as the ORM stores them, and a
later insert names an earlier one's row (the answer's writes: tests/escalations/test_answer.py)."""

from django.db import connection
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
                 Update(Task.objects.filter(pk=task.pk), {"title": "checked"}))  # fmt: skip
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
