"""The policy lab on a fleet's own work: a what-if on a live run, and finished runs as a corpus.

Read-only: both load a run's graph and the fleet's capabilities and hand them to the pure
simulator (`runs.simulation`); nothing is scheduled, no row is written.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from fleet.errors import Refusal, error
from fleet.models import Capability, Event, Fleet
from runs import scheduler, simulation
from runs.models import Attempt, Prerequisite, Run, Task

MAX_STEPS: Final = 100
# The simulator takes a step per wave of work and looks at the whole run each step: beyond this
# many tasks still to do, a request would take seconds.
MAX_TASKS: Final = 200
# What the what-if compares: the two policies a run can have, and naive as the control that
# shows what ignoring the outage would execute invalidly.
WHAT_IF_POLICIES: Final = ("global_halt", "scoped", "naive")
DOWN: Final = "down"


def what_if_choices(*, run: Run) -> list[str]:
    """The capabilities a manager may take down: the fleet's and the ones the run's tasks name."""
    named = set(Capability.objects.filter(fleet_id=run.fleet_id).values_list("name", flat=True))
    for capabilities, reads in Task.objects.filter(run=run).values_list(
        "capabilities", "reads_state_of"
    ):
        named.update(capabilities, reads)
    return sorted(named)


def what_if(*, run: Run, down: Sequence[str], steps: object) -> dict[str, Any]:
    """What global halt and scoped would do to the run, from its current state, if `down` went
    down now for `steps` steps: the lab's measures on the run's real graph.

    The run's succeeded tasks stay done, cancelled ones are not to be done, and every other task
    (pending, running, failed or with a person) is still to do. Capabilities already down are
    down for the same steps, and come back with the others.
    """
    errors = []
    choices = what_if_choices(run=run)
    wanted = [name.strip() for name in down if name.strip()]
    if not wanted:
        errors.append(error("down", "choose at least one capability to take down"))
    errors += [
        error("down", f"unknown capability {name!r} (one of {', '.join(choices) or 'none'})")
        for name in wanted
        if name not in choices
    ]
    count = _steps(steps)
    if isinstance(steps, list | tuple):  # the parameter given more than once
        msg = f"given {len(steps)} times: give one number of steps from 1 to {MAX_STEPS}"
        errors.append(error("steps", msg))
    elif count is None:
        errors.append(error("steps", f"a whole number of steps from 1 to {MAX_STEPS}"))
    nodes = scheduler.nodes_for(run)
    to_do = sum(1 for node in nodes.values() if node.state not in ("succeeded", "cancelled"))
    if to_do > MAX_TASKS:
        errors.append(
            error(
                "run",
                f"the what-if takes runs of up to {MAX_TASKS} tasks still to do; this "
                f"one has {to_do}: run policy_lab on a scenario file of it instead",
            )
        )
    if errors:
        raise Refusal(errors)
    assert count is not None
    world = scheduler.world_for(run)
    already = sorted(world.down - set(wanted))
    scenario = simulation.Scenario(
        name=run.key,
        domain=run.fleet.name,
        title=run.title or run.key,
        declared=nodes,
        truth=nodes,
        roles=dict(world.roles),
        outage=simulation.Outage(
            capabilities=tuple(dict.fromkeys([*wanted, *already])), start=0, steps=count
        ),
        claims=world.claims,
        expect=simulation.Expectation(kinds=()),
        category=simulation.OBSERVED,
    )
    policies = {}
    for policy in WHAT_IF_POLICIES:
        result = simulation.simulate(scenario, policy)
        invalid = {(e["task"], e["step"]) for e in result["invalid_executions"]}
        during = [
            key for key, step in result["executions"] if step < count and (key, step) not in invalid
        ]
        policies[policy] = {
            "useful": result["useful"],
            "useful_tasks": result["useful_tasks"],
            "during_outage": sorted(during),  # done validly
            "invalid": result["invalid"],
            "invalid_tasks": sorted({e["task"] for e in result["invalid_executions"]}),
            "rework": result["rework"],
            "completed_after_restoration": result["completed_after_restoration"],
            "steps_to_completion": result["recovery_steps"] + count,
            "recovery_steps": result["recovery_steps"],
            "completed": result["completed"],
            "localized_blockers": result["localized_blockers"],
            "run_wide_blockers": result["run_wide_blockers"],
        }
    return {
        "run": run.key,
        "down": list(scenario.outage.capabilities),
        "already_down": already,
        "steps": count,
        "to_do": to_do,
        "policies": policies,
        "hash": simulation.result_hash(policies),
    }


def _steps(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not (value.isascii() and value.isdecimal()):
            return None
        value = int(value)
    if isinstance(value, int) and 1 <= value <= MAX_STEPS:
        return value
    return None


def fleet_scenarios(*, fleet: Fleet) -> dict[str, dict[str, Any]]:
    """The fleet's finished runs as lab scenarios (name -> scenario JSON), one per outage a run
    saw: the capabilities the capability.changed history shows down while it ran.

    The run's tasks that had succeeded when the outage began are done; the outage starts at step
    0 and lasts one step per attempt the run finished while it lasted (at least one), or, if it
    outlasted the run, as many steps as the run had tasks left. A run that saw no outage is not
    a scenario.
    """
    runs = Run.objects.filter(
        fleet=fleet, state__in=(Run.State.SUCCEEDED, Run.State.FAILED)
    ).order_by("started_at", "key")
    changes = list(
        Event.objects.filter(fleet=fleet, type="capability.changed", response_status__lt=300)
        .order_by("received_at", "pk")
        .values_list("data", "received_at")
    )
    capabilities = list(Capability.objects.filter(fleet=fleet).values_list("name", "role"))
    scenarios = {}
    for run in runs:
        for number, outage in enumerate(_outages(run, changes), start=1):
            name = f"{run.key}-outage-{number}" if number > 1 else run.key
            scenarios[name] = _scenario(run, outage, capabilities)
    return scenarios


Outage = tuple[tuple[str, ...], datetime, datetime | None]  # capabilities, down at, back at


def _outages(run: Run, changes: Sequence[tuple[dict[str, Any], datetime]]) -> list[Outage]:
    """The outages the run saw: each stretch of its time with a capability down, with every
    capability down in it, from when the first went down (or the run began) until all were back
    (or the run ended)."""
    down: set[str] = set()
    during: list[tuple[str, bool, datetime]] = []
    for data, at in changes:
        name = data.get("capability")
        if not isinstance(name, str):
            continue
        if run.finished_at is not None and at > run.finished_at:
            break
        if at < run.started_at:
            _apply(down, name, data.get("status") == DOWN)  # what is down when the run begins
        else:
            during.append((name, data.get("status") == DOWN, at))
    found: list[Outage] = []
    names, since = set(down), run.started_at if down else None
    for name, is_down, at in during:
        _apply(down, name, is_down)
        if down:
            since = since or at
            names |= down
        elif since is not None:
            found.append((tuple(sorted(names)), since, at))
            names, since = set(), None
    if since is not None:
        found.append((tuple(sorted(names)), since, None))
    return found


def _apply(down: set[str], name: str, is_down: bool) -> None:
    if is_down:
        down.add(name)
    else:
        down.discard(name)


def _scenario(run: Run, outage: Outage, capabilities: Sequence[tuple[str, str]]) -> dict[str, Any]:
    names, began, back = outage
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    done_before = set(
        Attempt.objects.filter(
            task__run=run, outcome=Attempt.Outcome.SUCCEEDED, finished_at__lt=began
        ).values_list("task__key", flat=True)
    )
    finished_during = Attempt.objects.filter(task__run=run, finished_at__gte=began)
    if back is not None:
        finished_during = finished_during.filter(finished_at__lt=back)
    tasks = []
    for task in Task.objects.filter(run=run).order_by("pk"):
        node: dict[str, Any] = {
            "key": task.key,
            "title": task.title,
            "prerequisites": edges.get(task.pk, []),
            "capabilities": list(task.capabilities),
            "reads_state_of": list(task.reads_state_of),
            "effect": task.effect,
            "dependency_confidence": task.dependency_confidence,
            "weight": task.weight,
        }
        if task.transaction:
            node["transaction"] = task.transaction
        if task.key in done_before:
            node["state"] = "succeeded"
        elif task.state == Task.State.CANCELLED:
            node["state"] = "cancelled"
        tasks.append(node)
    left = sum(1 for t in tasks if "state" not in t)
    steps = finished_during.count() if back is not None else left
    named = {c for t in tasks for c in (*t["capabilities"], *t["reads_state_of"])}
    roles = {role: name for name, role in capabilities if role}
    known = sorted(named | set(names) | set(roles.values()))
    return {
        "domain": run.fleet.name,
        "category": simulation.OBSERVED,
        "title": run.title or run.key,
        "description": (
            f"{run.key} ({run.state}): {', '.join(names)} down from {began.isoformat()}"
            + (f" until {back.isoformat()}" if back else " until the run ended")
        ),
        "capabilities": known,
        "roles": roles,
        "outage": {"capabilities": list(names), "start": 0, "steps": max(1, steps)},
        "tasks": tasks,
    }
