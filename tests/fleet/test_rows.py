"""Model instances read in raw SQL are the ones the ORM builds, and instances written in bulk
are stored as the ORM stores them (on SQLite and PostgreSQL)."""

from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import rows, services
from fleet.models import Agent, Event, Fleet
from runs.models import Blocker, Claim, Evidence, FrontierChange, Run, Task


def read(sql: str, *params: object) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchone()
    assert found is not None
    return found


def test_an_instance_read_in_sql_equals_the_orms_own(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    Task.objects.create(
        run=run, key="t1", agent=agent, position=0, capabilities=["forge", "ci"],
        consumes=["a.b"], created_at=now,
    )  # fmt: skip
    sql = (
        f"SELECT {rows.columns(Task, 't')}, {rows.columns(Agent, 'a')} "
        "FROM runs_task t JOIN fleet_agent a ON a.id = t.agent_id WHERE t.key = %s"
    )
    row = read(sql, "t1")

    task = rows.instance(Task, row[: rows.width(Task)])
    its_agent = rows.instance(Agent, row[rows.width(Task) :])

    expected = Task.objects.get(key="t1")
    assert task is not None and its_agent is not None
    assert [getattr(task, f.attname) for f in Task._meta.concrete_fields] == [
        getattr(expected, f.attname) for f in Task._meta.concrete_fields
    ]
    assert task.capabilities == ["forge", "ci"]  # JSON, converted as the ORM does
    assert task.created_at == now  # a datetime, even on SQLite
    assert its_agent == agent and its_agent.is_orchestrator is False
    assert task._state.adding is False  # saved: an update, not an insert


def test_a_left_join_that_found_nothing_is_none(fleet: Fleet) -> None:
    sql = (
        f"SELECT {rows.columns(Fleet, 'f')}, {rows.columns(Run, 'r')} "
        "FROM fleet_fleet f LEFT JOIN runs_run r ON r.fleet_id = f.id WHERE f.id = %s"
    )
    row = read(sql, fleet.pk)

    assert rows.instance(Fleet, row[: rows.width(Fleet)]) == fleet
    assert rows.instance(Run, row[rows.width(Fleet) :]) is None


def stored[M: Model](model: type[M], pks: list[int]) -> list[list[object]]:
    found = {obj.pk: obj for obj in model.objects.filter(pk__in=pks)}
    return [[getattr(found[pk], f.attname) for f in model._meta.concrete_fields] for pk in pks]


def claims(run: Run, task: Task, prefix: str, at: datetime) -> list[Claim]:
    awkward = "tab\there, a newline\nthere, a back\\slash, 'quotes' \"both\", é ☃ 𝄞, \\N"
    return [
        Claim(run=run, task=task, key=f"{prefix}-plain", statement="the column exists",
              posted_at=at),
        Claim(run=run, task=task, key=f"{prefix}-awkward", statement=awkward, posted_at=at,
              about=[{"datasource": "orders", "table": awkward}], load_bearing=False,
              posted_by="agent:coder", status=Claim.Status.VERIFIED, checked_at=at + timedelta(1),
              verification_pending=True),
        Claim(run=run, task=task, key=f"{prefix}-empty", statement="", posted_at=at, about=[]),
    ]  # fmt: skip


def test_instances_written_in_bulk_are_stored_as_the_orm_stores_them(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    task = Task.objects.create(run=run, key="t1", agent=agent, position=0, created_at=now)
    ours, theirs = claims(run, task, "ours", now), claims(run, task, "orm", now)

    rows.insert(ours)
    Claim.objects.bulk_create(theirs)

    assert all(c.pk is not None and c._state.adding is False for c in ours)
    mine, orms = stored(Claim, [c.pk for c in ours]), stored(Claim, [c.pk for c in theirs])
    key = [f.attname for f in Claim._meta.concrete_fields].index("key")
    for row in (*mine, *orms):
        row[0] = row[key] = None  # their own keys
    assert mine == orms
    assert Claim.objects.get(pk=ours[1].pk).about == [
        {"datasource": "orders", "table": ours[1].statement}
    ]
    evidence = [
        Evidence(claim=ours[0], kind="query_result", source="SELECT 1", payload_hash="sha256:ab",
                 submitted_by="agent:coder", created_at=now, payload=None),
        Evidence(claim=ours[1], kind="query_result", source="SELECT 2", payload_hash="sha256:cd",
                 submitted_by="agent:coder", created_at=now, payload={"rows": [[1, None, 2.5]]}),
    ]  # fmt: skip
    rows.insert(evidence)
    assert [(e.claim_id, e.payload) for e in Evidence.objects.order_by("pk")] == [
        (ours[0].pk, None),  # SQL NULL, as the ORM stores None
        (ours[1].pk, {"rows": [[1, None, 2.5]]}),
    ]
    assert Evidence.objects.filter(payload__isnull=True).count() == 1


def test_nothing_to_insert_is_no_statement(db: None) -> None:
    with CaptureQueriesContext(connection) as queries:
        rows.insert([])
    assert not queries.captured_queries


@pytest.mark.postgres
def test_hundreds_of_instances_are_two_statements_on_postgresql(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    events = [
        Event(fleet=fleet, agent=agent, webhook_id=f"msg_{n}", body_sha256="ab" * 32,
              type="claim.posted", data={"n": n}, occurred_at=now, response_status=202,
              response={"type": "claim.posted", "n": n})
        for n in range(300)
    ]  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        rows.insert(events)
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT", "COPY"]
    assert len({e.pk for e in events}) == 300
    assert [
        e.response["n"] for e in Event.objects.filter(pk__in=[e.pk for e in events]).order_by("pk")
    ] == sorted(range(300), key=lambda n: events[n].pk)
    assert Event.objects.get(webhook_id="msg_7").data == {"n": 7}


def test_rows_copied_from_values_are_stored_as_the_orm_stores_them(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    task = Task.objects.create(run=run, key="t1", agent=agent, position=0, created_at=now)
    codes = [f"capability:c{n}" for n in range(3)]

    rows.copy(Blocker, ("task_id", "code", "set_at"), [(task.pk, code, now) for code in codes])
    Blocker.objects.bulk_create(
        Blocker(task=task, code=f"orm:{code}", set_at=now) for code in codes
    )

    ours = Blocker.objects.exclude(code__startswith="orm:").order_by("pk")
    theirs = Blocker.objects.filter(code__startswith="orm:").order_by("pk")
    assert len({b.pk for b in ours}) == 3  # keys the table gave
    assert [(b.task_id, b.code, b.set_at, b.cleared_at) for b in ours] == [
        (b.task_id, b.code.removeprefix("orm:"), b.set_at, b.cleared_at) for b in theirs
    ]
    assert [b.cleared_at for b in ours] == [None] * 3  # the table's default


@pytest.mark.postgres
def test_thousands_of_rows_copied_are_one_statement_on_postgresql(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    task = Task.objects.create(run=run, key="t1", agent=agent, position=0, created_at=now)
    values = [(task.pk, f"prerequisite:p{n}", now) for n in range(2_000)]

    with CaptureQueriesContext(connection) as queries:
        rows.copy(Blocker, ("task_id", "code", "set_at"), values)

    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["COPY"]
    assert Blocker.objects.filter(task=task).count() == 2_000


def test_a_copy_naming_a_relation_not_its_column_is_refused_and_writes_nothing(
    fleet: Fleet,
) -> None:
    with pytest.raises(ValueError, match=r"Blocker has no column named task, when \(attnames\)"):
        rows.copy(Blocker, ("task", "code", "when"), [(1, "capability:c", timezone.now())])
    assert not Blocker.objects.exists()


def test_a_key_taken_is_djangos_integrity_error_and_writes_nothing(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()

    def event(webhook_id: str) -> Event:
        return Event(fleet=fleet, agent=agent, webhook_id=webhook_id, body_sha256="ab" * 32,
                     type="claim.posted", data={}, occurred_at=now, response_status=202,
                     response={})  # fmt: skip

    rows.insert([event("msg_taken")])
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.insert([event("msg_new"), event("msg_taken")])
    assert list(Event.objects.values_list("webhook_id", flat=True)) == ["msg_taken"]


def test_a_new_instance_built_by_attname_is_the_keyword_built_one(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    values = dict(webhook_id="msg_1", body_sha256="ab" * 32, type="claim.posted", data={"a": 1},
                  occurred_at=now, received_at=now, response_status=202, response={})  # fmt: skip

    built = rows.new(Event, fleet_id=fleet.pk, agent_id=agent.pk, **values)
    expected = Event(fleet=fleet, agent=agent, **values)

    fields = Event._meta.concrete_fields
    assert [getattr(built, f.attname) for f in fields] == [
        getattr(expected, f.attname) for f in fields
    ]
    assert built.pk is None and built._state.adding is True
    defaulted = rows.new(Claim, run_id=1, task_id=1, key="k", statement="s", posted_at=now)
    assert (defaulted.about, defaulted.status, defaulted.load_bearing) == ([], "unverified", True)
    assert rows.new(Claim, posted_at=now).about is not rows.new(Claim, posted_at=now).about


def test_a_new_instance_refuses_a_field_its_model_has_not() -> None:
    with pytest.raises(TypeError, match="Claim has no field agent, colour"):
        rows.new(Claim, colour="red", agent="coder")


def test_one_instance_added_is_stored_as_the_orm_saves_it(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=now)
    task = Task.objects.create(run=run, key="t1", agent=agent, position=0, created_at=now)
    ours, theirs = claims(run, task, "ours", now), claims(run, task, "orm", now)

    with CaptureQueriesContext(connection) as queries:
        for claim in ours:
            rows.add(claim)
    for claim in theirs:
        claim.save(force_insert=True)

    assert len(queries.captured_queries) == 3
    assert all(c.pk is not None and c._state.adding is False for c in ours)
    mine, orms = stored(Claim, [c.pk for c in ours]), stored(Claim, [c.pk for c in theirs])
    key = [f.attname for f in Claim._meta.concrete_fields].index("key")
    for row in (*mine, *orms):
        row[0] = row[key] = None  # their own keys
    assert mine == orms


def test_an_instance_added_is_stamped_as_the_orm_stamps_it(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    run = Run.objects.create(fleet=fleet, key="r1", started_by=agent, started_at=timezone.now())
    change = rows.new(FrontierChange, run_id=run.pk, keys=["t1"], claims=["c1"])
    before = timezone.now()

    rows.add(change)

    stored_change = FrontierChange.objects.get(pk=change.pk)
    assert before <= stored_change.created_at == change.created_at <= timezone.now()
    assert (stored_change.keys, stored_change.claims, stored_change.may_hold) == (
        ["t1"],
        ["c1"],
        True,
    )


def test_an_instance_added_with_a_key_taken_is_djangos_integrity_error(fleet: Fleet) -> None:
    agent, _, _ = services.agent_create(fleet=fleet, name="coder", role="coding")
    now = timezone.now()

    def event(webhook_id: str) -> Event:
        return Event(fleet=fleet, agent=agent, webhook_id=webhook_id, body_sha256="ab" * 32,
                     type="claim.posted", data={"n": 1}, occurred_at=now, response_status=202,
                     response={})  # fmt: skip

    rows.add(event("msg_taken"))
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.add(event("msg_taken"))
    assert list(Event.objects.values_list("webhook_id", "data")) == [("msg_taken", {"n": 1})]
