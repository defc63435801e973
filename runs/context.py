"""What a task's next attempt is told: ground truth, scope, assignment."""

from typing import Any

from runs.models import Decision, Task


def next_attempt(task: Task) -> dict[str, Any]:
    decision = Decision.objects.filter(task=task).order_by("-created_at", "-id").first()
    blockers = sorted(task.blockers.filter(cleared_at__isnull=True).values_list("code", flat=True))
    return {
        "run": task.run.key,
        "task": task.key,
        "state": task.state,
        "agent": task.agent.name,
        "attempts": task.attempts.count(),
        "blockers": blockers,
        "decision": decision.action if decision else None,
        "reason": decision.reason if decision else None,
        "ground_truth": decision.ground_truth if decision else [],
        "scope": (decision.scope or None) if decision else None,
        "not_before": decision.not_before if decision else None,
    }
