"""Declaring the work: a run and its tasks (run.started), more tasks (tasks.added)."""

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.db.models import Max

from fleet import rows
from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent, Capability
from runs import scheduler
from runs.claims import consumers
from runs.graph import check_graph
from runs.models import Claim, Prerequisite, Run, Task
from runs.ownership import run_for, unknown_task
from runs.specs import TaskSpec

# (index in the event, the task if it parsed, its key if readable)
TaskEntry = tuple[int, TaskSpec | None, str | None]


def graph_digest(tasks: Sequence[TaskSpec]) -> str:
    """The declared graph, whatever the order of its tasks and lists (they are sets).

    A declaration that uses neither `checks` nor an empty `consumes` hashes as it did before
    they existed (a run declared then is still a no-op when sent again): `checks` counts only
    when given, and an explicit `consumes: []` is told from no `consumes` by a mark of its own.
    """
    specs = []
    for task in sorted(tasks, key=lambda t: t.key):
        spec = asdict(task)
        if task.consumes is not None and not task.consumes:
            spec["consumes_declared"] = True
        if not task.checks:
            del spec["checks"]
        for name in ("prerequisites", "capabilities", "reads_state_of", "consumes", "checks"):
            if name in spec:
                spec[name] = sorted(set(spec[name] or ()))
        specs.append(spec)
    canonical = json.dumps(specs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def stored_task_spec(task: Task, prerequisites: list[str], agent_name: str) -> TaskSpec:
    return TaskSpec(
        key=task.key,
        title=task.title,
        agent=agent_name,
        prerequisites=tuple(prerequisites),
        capabilities=tuple(task.capabilities),
        reads_state_of=tuple(task.reads_state_of),
        effect=task.effect,
        dependency_confidence=task.dependency_confidence,
        transaction=task.transaction or None,
        weight=task.weight,
        consumes=tuple(task.consumes) if task.consumes_declared else None,
        checks=tuple(task.checks),
    )


def stored_digest(run: Run) -> str:
    tasks = list(Task.objects.filter(run=run).select_related("agent").order_by("position"))
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    return graph_digest([stored_task_spec(t, edges.get(t.pk, []), t.agent.name) for t in tasks])


def task_errors(
    *, agents: Collection[str], existing: Collection[str], entries: Sequence[TaskEntry]
) -> list[ErrorItem]:
    """Every reference error of declared tasks: unknown agents, and the graph's errors.

    A task that did not parse (None) counts by its key, if readable; its references are not checked.
    """
    errors = [
        error(f"data.tasks.{i}.agent", f"no agent {spec.agent!r} in this fleet")
        for i, spec, _ in entries
        if spec is not None and spec.agent not in agents
    ]
    readable = [
        (i, key, spec.prerequisites if spec is not None else None)
        for i, spec, key in entries
        if key is not None
    ]
    graph = check_graph(
        [(key, prerequisites) for _, key, prerequisites in readable],
        existing=dict.fromkeys(existing, ()),
        positions=[i for i, _, _ in readable],
    )
    return errors + [error(e.loc, e.msg) for e in graph]


def add_tasks(*, fleet_id: int, run: Run, specs: Sequence[TaskSpec], at: datetime) -> list[Task]:
    """Validate new tasks against the run's graph and store them with their edges."""
    agents = {a.name: a for a in Agent.objects.filter(fleet_id=fleet_id)}
    existing: dict[str, int] = dict(Task.objects.filter(run=run).values_list("key", "pk"))
    errors = task_errors(
        agents=agents,
        existing=existing,
        entries=[(i, spec, spec.key) for i, spec in enumerate(specs)],
    )
    if errors:
        raise Refusal(errors)
    known = set(Capability.objects.filter(fleet_id=fleet_id).values_list("name", flat=True))
    needed = {name for s in specs for name in (*s.capabilities, *s.reads_state_of)} - known
    # Named, never reported on: unknown until someone says up or down (external effects wait).
    Capability.objects.bulk_create(
        [
            Capability(
                fleet_id=fleet_id, name=name, status=Capability.Status.UNKNOWN, changed_at=at
            )
            for name in sorted(needed)
        ],
        ignore_conflicts=True,
    )
    start = (Task.objects.filter(run=run).aggregate(m=Max("position"))["m"] or 0) + 1
    # On PostgreSQL with COPY (a run of 10,000 tasks spent most of its declaration in the ORM
    # compiling its INSERTs): the tasks given their keys, then their edges as plain values.
    tasks = [
        task_row(run, s, agents[s.agent], position=start + i, at=at) for i, s in enumerate(specs)
    ]
    rows.insert(tasks)
    ids = existing | {t.key: t.pk for t in tasks}
    if any(t.pk is None for t in tasks):  # backends that do not return ids from bulk inserts
        ids = dict(Task.objects.filter(run=run).values_list("key", "pk"))
    rows.copy(
        Prerequisite,
        ("task_id", "requires_id"),
        [(ids[s.key], ids[p]) for s in specs for p in dict.fromkeys(s.prerequisites)],
    )
    return tasks


def task_row(run: Run, spec: TaskSpec, agent: Agent, *, position: int, at: datetime) -> Task:
    return rows.new(  # thousands at once: built as rows read back are, not by keyword
        Task,
        run_id=run.pk,
        key=spec.key,
        title=spec.title,
        agent_id=agent.pk,
        position=position,
        capabilities=list(spec.capabilities),
        reads_state_of=list(spec.reads_state_of),
        effect=spec.effect,
        dependency_confidence=spec.dependency_confidence,
        transaction=spec.transaction or "",
        weight=spec.weight,
        consumes=list(spec.consumes or ()),
        consumes_declared=spec.consumes is not None,
        checks=list(dict.fromkeys(spec.checks)),
        created_at=at,
    )


def run_start(
    *,
    actor: Agent,
    at: datetime,
    key: str,
    title: str,
    policy: str,
    tasks: Sequence[TaskSpec],
    imported: bool = False,
) -> dict[str, Any]:
    """Declare a run and its tasks; the same declaration again is a no-op, another a 409."""
    fleet_id = actor.fleet_id
    existing = rows.one(Run.objects.filter(fleet_id=fleet_id, key=key))
    if existing is not None:
        declared = existing.declaration or stored_digest(existing)
        errors = []
        if declared != graph_digest(tasks):
            errors.append(error("data.tasks", f"run {key!r} was already declared with other tasks"))
        if existing.policy != policy:
            msg = f"run {key!r} was already declared with policy {existing.policy!r}; it cannot change"
            errors.append(error("data.policy", msg))
        if errors:
            raise Refusal(errors, 409)
        return {"run": existing.key, "created": False}
    run = Run.objects.create(
        fleet_id=fleet_id,
        key=key,
        title=title,
        policy=policy,
        started_by=actor,
        started_at=at,
        imported=imported,
        declaration=graph_digest(tasks),
    )
    add_tasks(fleet_id=fleet_id, run=run, specs=tasks, at=at)
    scheduler.mark_changed(run, [t.key for t in tasks])
    return {"run": run.key, "created": True, "tasks": len(tasks)}


def tasks_add(
    *, actor: Agent, at: datetime, run: str, tasks: Sequence[TaskSpec], imported: bool = False
) -> dict[str, Any]:
    """Add tasks to a running run (one declaration at a time: the run is locked)."""
    found = run_for(actor.fleet_id, run, lock=True)
    if found.state != Run.State.RUNNING and not imported:
        raise Refusal(
            [error("data.run", f"run {found.key!r} has {found.state}; no task can be added to it")],
            status=409,
        )
    add_tasks(fleet_id=actor.fleet_id, run=found, specs=tasks, at=at)
    if not imported:
        # A claim posted as not load-bearing that a new task consumes is load-bearing now.
        consumers.raise_if_consumed(
            list(Claim.objects.filter(run=found, load_bearing=False, superseded=False))
        )
    scheduler.mark_changed(found, [t.key for t in tasks])
    return {"run": found.key, "tasks": len(tasks)}


def reference_errors(
    *,
    fleet_id: int,
    event_type: str,
    run: object = None,
    task: object = None,
    claim: object = None,
    tasks: Sequence[TaskEntry] = (),
) -> list[ErrorItem]:
    """What a refused event's readable fields refer to that does not exist. Read-only.

    Only fields that parsed are looked up: the run, the task, the claim a check names, and the
    declared tasks (their agents, duplicate keys, unknown prerequisites, a cycle).
    """
    errors: list[ErrorItem] = []
    found: Run | None = None
    if event_type != "run.started" and isinstance(run, str):
        found = rows.one(Run.objects.filter(fleet_id=fleet_id, key=run))
        if found is None:
            errors.append(error("data.run", f"unknown run {run!r}"))
    if (
        found is not None
        and isinstance(task, str)
        and not Task.objects.filter(run=found, key=task).exists()
    ):
        errors.append(unknown_task(found, task))
    if (
        found is not None
        and event_type == "claim.checked"
        and isinstance(claim, str)
        and not Claim.objects.filter(run=found, key=claim).exists()
    ):
        errors.append(error("data.claim", f"unknown claim {claim!r} in run {found.key!r}"))
    if tasks:
        entries = tasks
        if event_type == "tasks.added" and found is None:
            # Without the run's graph, only the agents can be checked.
            entries = tuple((i, spec, None) for i, spec, _ in entries)
        existing = Task.objects.filter(run=found).values_list("key", flat=True) if found else ()
        errors += task_errors(
            agents=set(Agent.objects.filter(fleet_id=fleet_id).values_list("name", flat=True)),
            existing=set(existing),
            entries=entries,
        )
    return errors
