"""Pages of the work: the runs of a person's fleets, and one run with its graph and its story."""

from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from escalations.models import Escalation
from escalations.selectors import member_fleet_ids
from fleet.models import Delivery
from runs import selectors
from runs.models import Task

RUNS_PER_PAGE = 50
GRAPH_LIMIT = 500  # beyond this many tasks a drawing stops helping; the table still lists all


@login_required
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    found = selectors.runs_visible(member_fleet_ids(request.user))
    before = request.GET.get("before", "")
    at, _, pk = before.rpartition("_")
    try:
        found = found.filter(
            Q(started_at__lt=datetime.fromisoformat(at))
            | Q(started_at=datetime.fromisoformat(at), pk__lt=int(pk))
        )
    except ValueError:
        before = ""  # no place, or a mangled one: the newest runs
    rows = list(
        found.order_by("-started_at", "-pk").annotate(
            task_count=Count("tasks", distinct=True),
            waiting=Count(
                "escalations",
                filter=Q(escalations__status__in=Escalation.OPEN_STATES),
                distinct=True,
            ),
        )[: RUNS_PER_PAGE + 1]
    )
    more = len(rows) > RUNS_PER_PAGE
    rows = rows[:RUNS_PER_PAGE]
    older = f"{rows[-1].started_at.isoformat()}_{rows[-1].pk}" if more and rows else ""
    return render(request, "runs/runs.html", {"rows": rows, "older": older, "paged": bool(before)})


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
    found = get_object_or_404(selectors.runs_visible(member_fleet_ids(request.user)), pk=run_id)
    detail = selectors.run_detail(found)
    states = dict(
        Task.objects.filter(run=found).values_list("state").annotate(n=Count("id")).order_by()
    )
    deliveries = Delivery.objects.filter(
        fleet_id=found.fleet_id, payload__data__run=found.key
    ).order_by("-created_at", "-id")[:100]
    escalations = (
        Escalation.objects.filter(run=found)
        .select_related("task", "packet", "claimed_by")
        .order_by("-opened_at", "-id")
    )
    return render(
        request,
        "runs/run.html",
        {
            "run": found,
            "detail": detail,
            "states": states,
            "graph": graph_of(detail["tasks"]),
            "graph_limit": GRAPH_LIMIT,
            "deliveries": deliveries,
            "checkpoint": selectors.checkpoint_rows(found),
            "checkpoint_limit": selectors.CHECKPOINT_ROWS,
            "escalations": escalations,
            "open_states": Escalation.OPEN_STATES,
        },
    )
