"""Which run and task an event names, and whether its agent may act on that task."""

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model, QuerySet
from django.db.models.expressions import RawSQL

from fleet import rows
from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent, Fleet
from fleet.prepared import prepared_cursor
from runs.models import Run, Task


def run_for(fleet_id: int, key: str, loc: str = "data.run", *, lock: bool = False) -> Run:
    runs: QuerySet[Run] = Run.objects.filter(fleet_id=fleet_id, key=key)
    run = rows.one(runs.select_for_update() if lock else runs)
    if run is None:
        raise Refusal([error(loc, f"unknown run {key!r}")])
    return run


def find_task(run: Run, key: str, *, lock: bool = True) -> Task | None:
    """The run's task by its key, alone: joined to its agent, a planner behind the run's growth
    may read every task of the agent to find it (its agent is read when asked for)."""
    tasks = Task.objects.filter(run=run, key=key)
    return rows.one(tasks.select_for_update() if lock else tasks)


def unknown_task(run: Run, key: str, loc: str = "data.task") -> ErrorItem:
    return error(loc, f"unknown task {key!r} in run {run.key!r}")


def task_for(run: Run, key: str, loc: str = "data.task", *, lock: bool = True) -> Task:
    task = find_task(run, key, lock=lock)
    if task is None:
        raise Refusal([unknown_task(run, key, loc)])
    return task


def run_and_task(
    fleet_id: int,
    run: str,
    task: str,
    *,
    lock: bool = True,
    related: tuple[str, ...] = (),
    **facts: RawSQL,
) -> Task:
    """The task with its run and agent in one query (`task.run`), locked unless `lock` is False;
    `related` ("run__fleet") and `facts` (SQL over the task's row, `TASK`) are read in the same
    query. A miss asks again to say which of them is unknown.

    Written out, not built with the ORM: every event of a task reads it, and compiling the
    query cost more than running it."""
    connection = connections[DEFAULT_DB_ALIAS]
    models: list[type[Model]] = [Task, Run, Agent, *((Fleet,) if "run__fleet" in related else ())]
    unknown = set(related) - {"run__fleet"}
    if unknown:
        raise ValueError(f"run_and_task reads no {', '.join(sorted(unknown))}")
    params: list[Any] = []
    selected = [rows.columns(model, table(model)) for model in models]
    for fact in facts.values():
        selected.append(fact.sql)
        params += fact.params
    if connection.vendor == "postgresql":
        # The run first, then its task by the run's key index: joined the other way round, a
        # planner whose statistics predate the run's growth may read every task of the agent.
        task_row = (
            f"CROSS JOIN LATERAL (SELECT * FROM {table(Task)} WHERE run_id = {table(Run)}.id"  # noqa: S608
            f" AND key = %s LIMIT 1) {table(Task)} "
        )
        where = f"WHERE {table(Run)}.fleet_id = %s AND {table(Run)}.key = %s"
        params += [task, fleet_id, run]
    else:
        task_row = f"JOIN {table(Task)} ON {table(Task)}.run_id = {table(Run)}.id "
        where = (
            f"WHERE {table(Run)}.fleet_id = %s AND {table(Run)}.key = %s AND {table(Task)}.key = %s"
        )
        params += [fleet_id, run, task]
    joins = (
        f"FROM {table(Run)} {task_row}"
        f"JOIN {table(Agent)} ON {table(Agent)}.id = {table(Task)}.agent_id "
        + (
            f"JOIN {table(Fleet)} ON {table(Fleet)}.id = {table(Run)}.fleet_id "
            if Fleet in models
            else ""
        )
    )
    locked = lock and connection.features.has_select_for_update
    sql = (
        f"SELECT {', '.join(selected)} {joins}{where}"  # noqa: S608
        f" LIMIT 1{f' FOR UPDATE OF {table(Task)}' if locked else ''}"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        values = cursor.fetchone()
    if values is None:
        raise Refusal([unknown_task(run_for(fleet_id, run), task)])
    found: list[Any] = []
    at = 0
    for model in models:
        found.append(rows.instance(model, values[at : at + rows.width(model)]))
        at += rows.width(model)
    row, found_run, agent = found[:3]
    if Fleet in models:
        found_run._state.fields_cache["fleet"] = found[3]
    row._state.fields_cache["run"] = found_run
    row._state.fields_cache["agent"] = agent
    for (name, fact), value in zip(facts.items(), values[at:], strict=True):
        for convert in _converters(fact, connection):
            value = convert(value, fact, connection)
        setattr(row, name, value)
    return row


def table(model: type[Model]) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(str(model._meta.db_table))


TASK = f"{table(Task)}.id"  # a fact's SQL names the task's row by these


def fact(sql: str, field: Field, *params: Any) -> RawSQL:
    """A fact of the task `run_and_task` reads with it: `sql` names the task's row as {task}
    and its run's id as {run}."""
    return RawSQL(  # noqa: S611
        sql.format(task=TASK, run=f"{table(Task)}.run_id"), params, output_field=field
    )


def _converters(fact: RawSQL, connection: Any) -> list[Any]:
    return connection.ops.get_db_converters(fact) + fact.get_db_converters(connection)


def refuse_unless_own(
    *,
    task: Task,
    actor: Agent,
    sender: Agent | None = None,
    imported: bool = False,
    loc: str = "data.task",
) -> None:
    """An agent acts only on its own tasks; an orchestrator (`sender`) acts for one by naming it.

    The task's agent as it is now: a reroute hands the task (and the right to act on it) over.
    An import records history as it happened: its file, not an agent, names who did what.
    """
    if imported or task.agent_id == actor.pk:
        return
    owner = task.agent.name
    hint = (
        f"; to act for {owner}, name it in data.agent"
        if (sender or actor).is_orchestrator
        else f"; only {owner} (or an orchestrator naming {owner} in data.agent) may act on it"
    )
    raise Refusal(
        [error(loc, f"task {task.key!r} is {owner}'s, not {actor.name}'s{hint}")], status=403
    )
