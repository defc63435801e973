"""API routes of the work: a run, its frontier, a task's next-attempt context."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router
from ninja.errors import HttpError

from escalations.selectors import runs as selectors
from fleet.api.access import fleet_ids
from fleet.api.schemas import ERRORS, ContextOut, Errors, FrontierOut, RunOut, WhatIfOut
from runs import context, lab_runs, scheduler
from runs.models import Run, Task

router = Router(tags=["runs"])
DOWN = Query([], description="A capability to take down; repeat it or separate with commas.")


def get_run(request: HttpRequest, key: str) -> Run:
    # A key with a NUL byte names nothing (a declaration refuses one; PostgreSQL cannot hold one).
    run = (
        None
        if "\x00" in key
        else selectors.runs_visible(fleet_ids(request)).filter(key=key).first()
    )
    if run is None:
        raise HttpError(404, f"no run {key!r}")
    return run


@router.get(
    "/runs/{run}",
    response={200: RunOut, **ERRORS},
    summary="A run: tasks with state and blockers, claims, decisions, progress",
)
def run_detail(request: HttpRequest, run: str) -> dict[str, Any]:
    return selectors.run_detail(get_run(request, run))


@router.get(
    "/runs/{run}/frontier",
    response={200: FrontierOut, **ERRORS},
    summary="The run's safe ready frontier and its deferred tasks",
)
def run_frontier(request: HttpRequest, run: str) -> dict[str, Any]:
    found = get_run(request, run)
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
    response={200: WhatIfOut, **ERRORS, 422: Errors},
    summary="What global halt and scoped would do if capabilities went down now for N steps",
    description=(
        "`down`: a capability to take down (repeat it, or separate names with commas); "
        "`steps`: how long, 1 to 100. Computed by the policy lab's simulator on the run's graph "
        "from its current state; read-only: nothing is scheduled. A bad capability or number "
        "of steps is a 422 naming the parameter."
    ),
)
def run_what_if(
    request: HttpRequest, run: str, down: list[str] = DOWN, steps: str = ""
) -> dict[str, Any]:
    names = [name for value in down for name in value.split(",")]
    given = request.GET.getlist("steps")
    return lab_runs.what_if(
        run=get_run(request, run), down=names, steps=given if len(given) > 1 else steps
    )


@router.get(
    "/runs/{run}/tasks/{task}/context",
    response={200: ContextOut, **ERRORS},
    summary="Ground truth for the task's next attempt",
)
def task_context(request: HttpRequest, run: str, task: str) -> dict[str, Any]:
    its_run = get_run(request, run)
    found = (
        None
        if "\x00" in task
        else Task.objects.filter(run=its_run, key=task).select_related("run", "agent").first()
    )
    if found is None:
        raise HttpError(404, f"no task {task!r} in run {run!r}")
    return context.next_attempt(found)
