"""The run pages: the runs of a person's fleets, and one run with its graph and its story."""

from collections import Counter
from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from escalations.models import Escalation, JoinedTask
from escalations.selectors.runs import run_detail, runs_listed, runs_of
from escalations.services import claim_check_by_hand, claim_raise, task_release_stop
from fleet.access import reviews
from fleet.errors import Refusal
from fleet.models import Capability, Delivery
from runs.lab_runs import what_if_choices
from runs.models import Artifact, Claim, Run, Task
from runs.selectors import CHECKPOINT_ROWS, checkpoint_rows
from runs.task_state import STOP

STATE_ORDER = ("ready", "pending", "running", "escalated", "failed", "succeeded", "cancelled")
RUNS_PER_PAGE = 50
GRAPH_LIMIT = 500  # beyond this many tasks a drawing stops helping; the table still lists all
ARTIFACTS_SHOWN = 200  # the oldest first; past it, counted


@login_required
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    found = runs_of(request.user)
    before = request.GET.get("before", "")
    at, _, pk = before.rpartition("_")
    try:
        found = found.filter(
            Q(started_at__lt=datetime.fromisoformat(at))
            | Q(started_at=datetime.fromisoformat(at), pk__lt=int(pk))
        )
    except ValueError:
        before = ""  # no place, or a mangled one: the newest runs
    rows = runs_listed(found, RUNS_PER_PAGE + 1)
    more = len(rows) > RUNS_PER_PAGE
    rows = rows[:RUNS_PER_PAGE]
    older = f"{rows[-1].started_at.isoformat()}_{rows[-1].pk}" if more and rows else ""
    return render(
        request, "escalations/runs.html", {"rows": rows, "older": older, "paged": bool(before)}
    )


def graph_of(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Nodes and edges for the drawing (cytoscape's shape), states and blockers on the nodes."""
    shown = tasks[:GRAPH_LIMIT]
    keys = {t["key"] for t in shown}
    return {
        "nodes": [
            {
                "data": {
                    "id": t["key"],
                    "label": t["key"],
                    "state": "ready" if t["state"] == "pending" and t["ready"] else t["state"],
                    "agent": t["agent"],
                    "blockers": t["blockers"],
                    # Waiting for a prerequisite to finish is not being blocked.
                    "blocked": any(not b.startswith("prerequisite:") for b in t["blockers"]),
                }
            }
            for t in shown
        ],
        "edges": [
            {"data": {"id": f"{p}->{t['key']}", "source": p, "target": t["key"]}}
            for t in shown
            for p in t["prerequisites"]
            if p in keys
        ],
        "truncated": len(tasks) > GRAPH_LIMIT,
    }


@login_required
@require_GET
def run(request: HttpRequest, run_id: int) -> HttpResponse:
    found = run_for(request, run_id)
    refused = request.session.pop(flash_key(run_id), None)
    return run_page(request, found, refused=refused if isinstance(refused, dict) else None)


def run_for(request: HttpRequest, run_id: int) -> Run:
    """The run if it belongs to one of the person's fleets; 404 otherwise."""
    return get_object_or_404(runs_of(request.user), pk=run_id)


def run_page(
    request: HttpRequest, found: Run, *, refused: dict[str, Any] | None = None
) -> HttpResponse:
    detail = run_detail(found)
    can_act = reviews(request.user, found.fleet_id)
    # The rows' ids, for the reviewer's actions on them (a claim's verdict, a task's release).
    claim_ids = dict(Claim.objects.filter(run=found).values_list("key", "pk"))
    for claim in detail["claims"]:
        claim["id"] = claim_ids.get(claim["key"])
        claim["anchor"] = f"claim-{claim['id']}"
    tasks = {
        key: (pk, released)
        for key, pk, released in Task.objects.filter(run=found).values_list("key", "pk", "released")
    }
    # A capability blocker of a capability nobody reported on says so (it is not down).
    unknown = [
        f"capability:{name}"
        for name in Capability.objects.filter(
            fleet_id=found.fleet_id, status=Capability.Status.UNKNOWN
        ).values_list("name", flat=True)
    ]
    inline = can_act and found.state == Run.State.RUNNING
    refused_at = (refused or {}).get("at") if inline else None
    for task in detail["tasks"]:
        # What each row shows, worked out here once: the table has a row for every task of the
        # run, and a lookup or a filter in the template costs more per row than it does here.
        task["id"], task["released"] = tasks[task["key"]]
        task["anchor"] = f"task-{task['key']}"
        task["stopped"] = STOP in task["blockers"]
        task["unknown"] = [b for b in task["blockers"] if b in unknown]
        # A pending task in the ready frontier is shown (and counted) as ready.
        task["shown"] = (
            "ready" if task["state"] == Task.State.PENDING and task["ready"] else task["state"]
        )
        task["blocks"] = [(b, b in unknown) for b in task["blockers"]]
        task["after"] = ", ".join(task["prerequisites"]) or "—"
        task["notes"] = bool(task["consumes_declared"] or task["checks"] or task["halted"])
        task["releasable"] = task["stopped"] and inline
        task["refused"] = refused_at is not None and refused_at == task["anchor"]
        task["more"] = task["released"] or task["releasable"] or task["refused"]
    counted = Counter(t["shown"] for t in detail["tasks"])
    states = {state: counted[state] for state in STATE_ORDER if counted[state]}
    for decision in detail["decisions"]:
        decision["label"] = str(decision["action"]).replace("_", " ")  # carry_on: "carry on"
    deliveries = Delivery.objects.filter(
        fleet_id=found.fleet_id, payload__data__run=found.key
    ).order_by("-created_at", "-id")[:100]
    # What the run's tasks reported making: the artifacts each claim's blast radius counts.
    artifacts = (
        Artifact.objects.filter(task__run=found).select_related("task").order_by("created_at", "id")
    )
    escalations = (
        Escalation.objects.filter(run=found)
        .select_related("task", "packet", "claimed_by")
        .order_by("-opened_at", "-id")
    )
    return render(
        request,
        "escalations/run.html",
        {
            "run": found,
            "detail": detail,
            "states": states,
            "graph": graph_of(detail["tasks"]),
            "graph_limit": GRAPH_LIMIT,
            "deliveries": deliveries,
            "artifacts": artifacts[:ARTIFACTS_SHOWN],
            "artifact_count": artifacts.count(),
            "artifacts_shown": ARTIFACTS_SHOWN,
            "checkpoint": checkpoint_rows(found),
            "checkpoint_limit": CHECKPOINT_ROWS,
            "what_if": {"choices": what_if_choices(run=found), "down": [], "steps": 3},
            "escalations": escalations,
            # Tasks of this run whose packets joined an escalation with the same question.
            "joined": JoinedTask.objects.filter(task__run=found)
            .select_related("task", "escalation", "escalation__task", "escalation__run")
            .select_related("escalation__packet")
            .order_by("-joined_at", "-id"),
            "open_states": Escalation.OPEN_STATES,
            "can_act": can_act,
            # A refusal is shown at its row's form; when there is none (the run has finished),
            # at the top of the page.
            "refused": {**(refused or {}), "inline": can_act and found.state == Run.State.RUNNING},
        },
    )


def flash_key(run_id: int) -> str:
    return f"run-refused-{run_id}"


def back_to_run(
    request: HttpRequest, found: Run, anchor: str, refused: Refusal | None = None
) -> HttpResponse:
    """Redirect-after-post to the run page; a refusal is shown there once, at its row, with the
    draft kept. A manager is told why on the 403 page."""
    url = reverse("run", args=[found.pk])
    if refused is not None and refused.status == 403:
        return render(
            request,
            "403.html",
            {"message": refused.message, "back": url, "back_label": "Back to the run"},
            status=403,
        )
    if refused is not None:
        form = {k: str(v) for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}
        request.session[flash_key(found.pk)] = {
            "error": refused.message,
            "form": form,
            "at": anchor,
        }
    return redirect(f"{url}#{anchor}")


@login_required
@require_POST
def claim_check(request: HttpRequest, run_id: int, claim_id: int) -> HttpResponse:
    """A reviewer verifies or refutes one of the run's claims by hand."""
    found = run_for(request, run_id)
    claim = get_object_or_404(
        Claim.objects.select_related("run", "run__fleet"), pk=claim_id, run=found
    )
    try:
        claim_check_by_hand(
            claim=claim,
            reviewer=request.user,
            verdict=request.POST.get("verdict", ""),
            note=request.POST.get("note", ""),
            seen=request.POST.get("seen", ""),
        )
    except Refusal as refused:
        return back_to_run(request, found, f"claim-{claim.pk}", refused)
    return back_to_run(request, found, f"claim-{claim.pk}")


@login_required
@require_POST
def claim_load_bearing(request: HttpRequest, run_id: int, claim_id: int) -> HttpResponse:
    """A reviewer makes a claim load-bearing."""
    found = run_for(request, run_id)
    claim = get_object_or_404(
        Claim.objects.select_related("run", "run__fleet"), pk=claim_id, run=found
    )
    try:
        claim_raise(claim=claim, reviewer=request.user)
    except Refusal as refused:
        return back_to_run(request, found, f"claim-{claim.pk}", refused)
    return back_to_run(request, found, f"claim-{claim.pk}")


@login_required
@require_POST
def task_release(request: HttpRequest, run_id: int, task_id: int) -> HttpResponse:
    """A reviewer releases a task's uncertain-dependency stop."""
    found = run_for(request, run_id)
    task = get_object_or_404(Task, pk=task_id, run=found)
    try:
        task_release_stop(task=task, reviewer=request.user)
    except Refusal as refused:
        return back_to_run(request, found, f"task-{task.key}", refused)
    return back_to_run(request, found, f"task-{task.key}")
