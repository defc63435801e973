"""API routes of the work: a run, its frontier, a task's next-attempt context."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import HttpError

from escalations.selectors import runs as selectors
from fleet.api.access import fleet_ids
from fleet.api.schemas import ERRORS, ContextOut, Errors, FrontierOut, RunOut, WhatIfOut
from runs import context, lab_runs, scheduler
from runs.models import Run, Task

router = Router(tags=["runs"])
DOWN = Query([], description="A capability to take down; repeat it or separate with commas.")
FLEET = Query(
    None,
    description="The fleet's name: needed only by a person in several fleets that each have a "
    "run with this key (an agent's token reads its own fleet).",
)
RUN_ERRORS: dict[int, type[Schema]] = {**ERRORS, 409: Errors}


def get_run(request: HttpRequest, key: str, fleet: str | None = None) -> Run:
    """The run of that key in the reader's fleets; a person in several fleets with such a run
    names the fleet (`?fleet=`), or gets a 409 listing them (never one picked at random)."""
    # A key with a NUL byte names nothing (a declaration refuses one; PostgreSQL cannot hold one).
    if "\x00" in key or (fleet and "\x00" in fleet):
        raise HttpError(404, f"no run {key!r}" + (f" in fleet {fleet!r}" if fleet else ""))
    runs = selectors.runs_visible(fleet_ids(request)).filter(key=key)
    if fleet:
        runs = runs.filter(fleet__name=fleet)
    found = list(runs.order_by("fleet__name")[:10])
    if not found:
        raise HttpError(404, f"no run {key!r}" + (f" in fleet {fleet!r}" if fleet else ""))
    if len(found) > 1:
        names = ", ".join(run.fleet.name for run in found)
        raise HttpError(
            409, f"run {key!r} is in several of your fleets ({names}): name one with ?fleet=<name>"
        )
    return found[0]


@router.get(
    "/runs/{run}",
    response={200: RunOut, **RUN_ERRORS},
    summary="A run: tasks with state and blockers, claims, decisions, progress",
)
def run_detail(request: HttpRequest, run: str, fleet: str | None = FLEET) -> dict[str, Any]:
    return selectors.run_detail(get_run(request, run, fleet))


@router.get(
    "/runs/{run}/frontier",
    response={200: FrontierOut, **RUN_ERRORS},
    summary="The run's safe ready frontier and its deferred tasks",
)
def run_frontier(request: HttpRequest, run: str, fleet: str | None = FLEET) -> dict[str, Any]:
    found = get_run(request, run, fleet)
    result = scheduler.frontier_of(found)
    deferred = {key: list(b) for key, b in result.deferred.items()}
    ready = list(result.ready)
    if found.state != Run.State.RUNNING:
        # A run that is over starts nothing more: every pending task waits on that, first.
        over = f"run:{found.state}"
        for key in ready:
            deferred[key] = []
        deferred = {key: [over, *b] for key, b in deferred.items()}
        ready = []
    return {
        "policy": result.policy,
        "ready": ready,
        "deferred": [{"task": key, "blockers": b} for key, b in sorted(deferred.items())],
    }


@router.get(
    "/runs/{run}/what-if",
    response={200: WhatIfOut, **RUN_ERRORS, 422: Errors},
    summary="What global halt and scoped would do if capabilities went down now for N steps",
    description=(
        "`down`: a capability to take down (repeat it, or separate names with commas); "
        "`steps`: how long, 1 to 100. Computed by the policy lab's simulator on the run's graph "
        "from its current state; read-only: nothing is scheduled. A bad capability or number "
        "of steps is a 422 naming the parameter."
    ),
)
def run_what_if(
    request: HttpRequest,
    run: str,
    down: list[str] = DOWN,
    steps: str = "",
    fleet: str | None = FLEET,
) -> dict[str, Any]:
    names = [name for value in down for name in value.split(",")]
    given = request.GET.getlist("steps")
    return lab_runs.what_if(
        run=get_run(request, run, fleet), down=names, steps=given if len(given) > 1 else steps
    )


@router.get(
    "/runs/{run}/tasks/{task}/context",
    response={200: ContextOut, **RUN_ERRORS},
    summary="Ground truth for the task's next attempt",
)
def task_context(
    request: HttpRequest, run: str, task: str, fleet: str | None = FLEET
) -> dict[str, Any]:
    its_run = get_run(request, run, fleet)
    found = (
        None
        if "\x00" in task
        else Task.objects.filter(run=its_run, key=task).select_related("run", "agent").first()
    )
    if found is None:
        raise HttpError(404, f"no task {task!r} in run {run!r}")
    return context.next_attempt(found)
