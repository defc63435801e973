"""The facts the retry policy decides on, read from the database: attempts, budget, peers, truth."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from fleet.models import Agent
from runs import policy
from runs.claims.hashing import HUMAN_ANSWER
from runs.models import Attempt, Claim, Decision, Evidence, Run, Task

FLEET_BUDGET_PERIOD = timedelta(hours=1)  # Fleet.retry_budget is per hour


def attempt_views(task: Task) -> list[policy.AttemptView]:
    views = []
    for a in task.attempts.select_related("agent").order_by("number"):
        failure = None
        if a.failure_kind:
            failure = policy.Failure(
                kind=a.failure_kind,
                signature=a.failure_signature,
                message=a.failure_message,
                capability=a.failure_capability or None,
            )
        views.append(
            policy.AttemptView(
                number=a.number,
                agent=policy.TOOL + a.agent.name if a.agent.is_tool else a.agent.name,
                prompt_hash=a.prompt_hash,
                context_hash=a.context_hash,
                outcome=a.outcome or None,
                failure=failure,
                reframed=a.reframed,
                rerouted=a.rerouted,
                resumed=a.resumed,
                background_killed=tuple(a.background_killed),
                resumable=a.resumable,
            )
        )
    return views


def budget_for(run: Run, task: Task, now: datetime) -> policy.Budget:
    retries = Decision.objects.filter(action=Decision.Action.RETRY)
    return policy.Budget(
        task_retries_used=retries.filter(task=task).count(),
        fleet_retries_used=retries.filter(
            run__fleet_id=run.fleet_id, created_at__gt=now - FLEET_BUDGET_PERIOD
        ).count(),
        fleet_budget=run.fleet.retry_budget,
    )


def recent_capability_failures(run: Run, attempt: Attempt, config: policy.RetryConfig) -> int:
    """Transient failures naming the attempt's capability across the fleet, within the window.

    Counted on the agents' clock (the attempts' finish times), ending at this attempt's.
    """
    if attempt.failure_kind != "transient" or not attempt.failure_capability:
        return 0
    end = attempt.finished_at
    if end is None:
        return 0
    since = end - timedelta(seconds=config.breaker_window_s)
    # The failures up to the last trip were counted then: once it is back they trip it no more.
    tripped = (
        Decision.objects.filter(
            run__fleet_id=run.fleet_id,
            trip_capability=attempt.failure_capability,
            attempt__finished_at__lt=end,
        )
        .order_by("-attempt__finished_at")
        .values_list("attempt__finished_at", flat=True)
        .first()
    )
    if tripped is not None:
        since = max(since, tripped)
    return Attempt.objects.filter(
        task__run__fleet_id=run.fleet_id,
        failure_kind="transient",
        failure_capability=attempt.failure_capability,
        finished_at__gt=since,
        finished_at__lte=end,
    ).count()


def peers(task: Task) -> list[Agent]:
    """Agents of the task's role, by name: where a reroute may go. No role, no peers."""
    if not task.agent.role:
        return []
    return list(
        Agent.objects.filter(fleet_id=task.agent.fleet_id, role=task.agent.role).order_by("name")
    )


def alternatives_for(task: Task) -> list[str]:
    return [a.name for a in peers(task) if not a.is_tool and a.pk != task.agent_id]


def tools_for(task: Task) -> list[str]:
    return [a.name for a in peers(task) if a.is_tool]


def ground_truth_for(task: Task, extra: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """What the task's next attempt lacked: reality for refuted claims it posted or consumed,
    and reviewers' answers given for it; oldest first, each once."""
    consumed = Q(key__in=list(task.consumes)) | Q(uses__task=task)
    refuted = Claim.objects.filter(run_id=task.run_id, status=Claim.Status.REFUTED).filter(
        Q(task=task) | consumed
    )
    rows = (
        Evidence.objects.filter(
            Q(claim__in=refuted, role=Evidence.Role.REALITY)
            | Q(claim__in=refuted, kind=HUMAN_ANSWER, verdict=Claim.Status.REFUTED)
            | Q(claim__task=task, kind=HUMAN_ANSWER, verdict=Claim.Status.VERIFIED)
        )
        .select_related("claim")
        .order_by("created_at", "id")
    )
    truth: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        item: dict[str, Any] = {
            "claim": row.claim.key,
            "statement": row.claim.statement,
            "kind": row.kind,
            "source": row.source,
            "datasource": row.datasource or None,
            "workspace": row.workspace or None,
            "payload_hash": row.payload_hash or None,
            "payload": row.payload,
            "reason": row.verdict_reason,
            "checked_by": row.submitted_by,
        }
        truth.setdefault(truth_key(item), item)
    for given in extra:
        truth.setdefault(truth_key(given), dict(given))
    return list(truth.values())


def truth_key(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return (item.get("claim"), item.get("kind"), item.get("source"), item.get("payload_hash"))
