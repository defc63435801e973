"""Reads of the work: a run as the API and the run page show it."""

from typing import Any

from django.db.models import QuerySet

from runs.models import Blocker, Claim, Decision, Prerequisite, ProgressLine, Run, Task


def runs_visible(fleet_ids: list[int]) -> QuerySet[Run]:
    return Run.objects.filter(fleet_id__in=fleet_ids).select_related("fleet")


def task_rows(run: Run) -> list[dict[str, Any]]:
    blockers: dict[int, list[str]] = {}
    for task_id, code in Blocker.objects.filter(task__run=run, cleared_at__isnull=True).values_list(
        "task_id", "code"
    ):
        blockers.setdefault(task_id, []).append(code)
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    return [
        {
            "key": t.key,
            "title": t.title,
            "agent": t.agent.name,
            "state": t.state,
            "ready": t.ready,
            "blockers": sorted(blockers.get(t.pk, [])),
            "prerequisites": edges.get(t.pk, []),
            "capabilities": t.capabilities,
            "reads_state_of": t.reads_state_of,
            "effect": t.effect,
            "dependency_confidence": t.dependency_confidence,
            "transaction": t.transaction or None,
            "consumes": t.consumes,
            "started_at": t.started_at,
            "finished_at": t.finished_at,
        }
        for t in Task.objects.filter(run=run).select_related("agent").order_by("position")
    ]


def claim_rows(run: Run) -> list[dict[str, Any]]:
    from escalations.selectors import radii_for

    radii = radii_for(run)
    return [
        {
            "key": c.key,
            "task": c.task.key,
            "statement": c.statement,
            "load_bearing": c.load_bearing,
            "status": c.status,
            "reason": c.status_reason,
            "posted_at": c.posted_at,
            "checked_at": c.checked_at,
            "blast_radius": radii.get(c.key),
        }
        for c in Claim.objects.filter(run=run).select_related("task").order_by("posted_at", "id")
    ]


def decision_rows(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "task": d.task.key,
            "attempt": d.attempt.number if d.attempt else None,
            "action": d.action,
            "reason": d.reason,
            "not_before": d.not_before,
            "reroute_to": d.reroute_to or None,
            "at": d.created_at,
        }
        for d in Decision.objects.filter(run=run).select_related("task", "attempt")
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
            {"task": p.task.key if p.task else None, "text": p.text, "at": p.created_at}
            for p in ProgressLine.objects.filter(run=run).select_related("task")
        ],
    }
