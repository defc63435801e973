"""The run pages' reads that need blast radius: a run's claims, and the whole run."""

from typing import Any

from django.db.models import QuerySet

from escalations.selectors.radius import radii_for
from fleet.access import member_fleet_ids
from runs.claims.bearing import subjects_of
from runs.models import Claim, ProgressLine, Run
from runs.selectors import decision_rows, runs_visible, task_rows


def runs_of(user: Any) -> QuerySet[Run]:
    """The runs of the person's fleets: a run of any other is not found."""
    return runs_visible(member_fleet_ids(user))


def claim_rows(run: Run) -> list[dict[str, Any]]:
    radii = radii_for(run)
    return [
        {
            "key": c.key,
            "task": c.task.key,
            "statement": c.statement,
            "subjects": list(subjects_of(c.about, c.statement)),
            "load_bearing": c.load_bearing,
            "status": c.status,
            "reason": c.status_reason,
            "posted_at": c.posted_at,
            "checked_at": c.checked_at,
            "blast_radius": radii.get(c.key),
        }
        for c in Claim.objects.filter(run=run).select_related("task").order_by("posted_at", "id")
    ]


def run_detail(run: Run) -> dict[str, Any]:
    return {
        "run": run.key,
        "fleet": run.fleet.name,
        "title": run.title,
        "policy": run.policy,
        "state": run.state,
        "cause": run.cause or None,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "tasks": task_rows(run),
        "claims": claim_rows(run),
        "decisions": decision_rows(run),
        "progress": [
            {
                "task": p.task.key if p.task else None,
                "text": p.text,
                "killed": p.killed,
                "at": p.created_at,
            }
            for p in ProgressLine.objects.filter(run=run).select_related("task")
        ],
    }
