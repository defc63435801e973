"""Model instances read in raw SQL are the ones the ORM builds (on SQLite and PostgreSQL)."""

from django.db import connection
from django.utils import timezone

from fleet import rows, services
from fleet.models import Agent, Fleet
from runs.models import Run, Task


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
