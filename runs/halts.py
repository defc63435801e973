"""Halts: a claim refuted while tasks were running on it stops them, and holds what they produce.

Each task running on the claim (it consumes it, by name or implicitly, or named it when it
started) gets a signed `task.halted` with the ground truth. Its finish does not release its
dependants: the frontier gives them `claim:<key>` (and the task itself, if it runs again) until
the claim is verified again or a reviewer's answer takes its key; the recompute then settles
the halt.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from django.utils import timezone

from fleet.outbox import notify
from runs import scheduler
from runs.claims import consumers
from runs.models import Claim, ClaimUse, Halt, Run, Task


def running_on(claim: Claim) -> list[Task]:
    """The running tasks that consume the claim or started on it, but its producer and the tasks
    that exist to check it."""
    ids = {pk for pk, _, state in consumers.consumers(claim) if state == Task.State.RUNNING}
    ids |= set(
        ClaimUse.objects.filter(claim=claim, by_check=False, task__state=Task.State.RUNNING)
        .exclude(task_id=claim.task_id)
        .values_list("task_id", flat=True)
    )
    tasks = Task.objects.filter(pk__in=sorted(ids)).select_related("agent").order_by("key")
    return [task for task in tasks if claim.key not in task.checks]


def halt_running_consumers(*, claim: Claim, reality: Sequence[Mapping[str, Any]]) -> list[str]:
    """Halt every task running on a claim that was just refuted; the keys of those halted.

    Called in the refuting transaction. A run that is over, or a past run being imported, halts
    nothing: there is no one left to tell.
    """
    run = claim.run
    if run.state != Run.State.RUNNING or run.imported:
        return []
    now = timezone.now()
    halted = []
    for task in running_on(claim):
        attempt = task.attempts.order_by("-number").values_list("number", flat=True).first() or 0
        reason = (
            f"{claim.key} was refuted while {task.key} was running on it: {claim.status_reason}. "
            f"Stop building on it: until it is verified again or a reviewer's answer replaces "
            f"it, what {task.key} produces releases nothing (its dependants wait with "
            f"claim:{claim.key})."
        )
        Halt.objects.update_or_create(
            task=task,
            claim=claim,
            defaults={
                "key": claim.key,
                "attempt": attempt,
                "reason": reason,
                "halted_at": now,
                "settled_at": None,
            },
        )
        notify(
            run.fleet,
            "task.halted",
            {
                "run": run.key,
                "task": task.key,
                "agent": task.agent.name,
                "attempt": attempt,
                "claim": claim.key,
                "statement": claim.statement,
                "reason": reason,
                "ground_truth": [dict(item) for item in reality],
            },
        )
        halted.append(task.key)
    if halted:
        scheduler.mark_changed(run, halted)
    return halted
