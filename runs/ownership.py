"""Which run and task an event names, and whether its agent may act on that task."""

from typing import Any

from django.db.models import QuerySet

from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent
from runs.models import Run, Task


def run_for(fleet_id: int, key: str, loc: str = "data.run", *, lock: bool = False) -> Run:
    runs: QuerySet[Run] = Run.objects.filter(fleet_id=fleet_id, key=key)
    run = (runs.select_for_update() if lock else runs).first()
    if run is None:
        raise Refusal([error(loc, f"unknown run {key!r}")])
    return run


def find_task(run: Run, key: str, *, lock: bool = True) -> Task | None:
    tasks = Task.objects.filter(run=run, key=key).select_related("agent")
    return (tasks.select_for_update(of=("self",)) if lock else tasks).first()


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
    **annotations: Any,
) -> Task:
    """The task with its run and agent in one query (`task.run`), locked unless `lock` is False;
    `related` and `annotations` are read in the same query. A miss asks again to say which of
    them is unknown."""
    tasks = (
        Task.objects.filter(run__fleet_id=fleet_id, run__key=run, key=task)
        .select_related("run", "agent", *related)
        .annotate(**annotations)
    )
    found = (tasks.select_for_update(of=("self",)) if lock else tasks).first()
    if found is None:
        raise Refusal([unknown_task(run_for(fleet_id, run), task)])
    return found


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
