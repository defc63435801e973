"""What a task's next attempt is told: ground truth, scope, assignment."""

from typing import Any

from django.db.models import Max

from runs import scheduler
from runs.models import Decision, Task
from runs.start_gate import must_change


def next_attempt(task: Task) -> dict[str, Any]:
    """The latest decision, with every piece of ground truth the task was given and its scope.

    Ground truth accumulates: a retry or a Resume keeps the context of the reframe before it,
    and a reroute hands the new agent what the old one had learnt.
    """
    decisions = list(Decision.objects.filter(task=task).order_by("created_at", "id"))
    decision = decisions[-1] if decisions else None
    truth: list[Any] = []
    for d in decisions:
        truth += [item for item in d.ground_truth if item not in truth]
    scope = next((d.scope for d in reversed(decisions) if d.scope), None)
    blockers = sorted(task.blockers.filter(cleared_at__isnull=True).values_list("code", flat=True))
    # What the next attempt must do differently: the start gate refuses it otherwise.
    number = (task.attempts.aggregate(n=Max("number"))["n"] or 0) + 1
    before = scheduler.decision_before(task, number) if task.state != Task.State.RUNNING else None
    return {
        "run": task.run.key,
        "task": task.key,
        "state": task.state,
        "agent": task.agent.name,
        "attempts": task.attempts.count(),
        "blockers": blockers,
        "decision": decision.action if decision else None,
        "decision_id": decision.pk if decision else None,
        "reason": decision.reason if decision else None,
        "ground_truth": truth,
        "scope": scope,
        "not_before": decision.not_before if decision else None,
        "must_change": must_change(before),
        "previous_attempt": (
            {
                "number": before.attempt.number,
                "agent": before.attempt.agent.name,
                "prompt_hash": before.attempt.prompt_hash,
                "context_hash": before.attempt.context_hash,
            }
            if before is not None and before.attempt is not None and must_change(before)
            else None
        ),
        "refresh": list(task.refresh),
    }
