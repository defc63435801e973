"""Who waits on an escalation: its own task and the tasks that joined it on the same question,
and how an escalation ended, as people and agents read it."""

from typing import Any

from escalations.models import Escalation, JoinedTask

# How an escalation ended, beyond its status: closed is rerouted, aborted, closed because its
# run failed, or joined (its task waits on another escalation with the same question).
OUTCOME_WORDS = {
    Escalation.Outcome.REROUTED: "rerouted",
    Escalation.Outcome.ABORTED: "aborted",
    Escalation.Outcome.RUN_FAILED: "closed: run failed",
    Escalation.Outcome.JOINED: "joined another",
}


def outcome_of(escalation: Escalation) -> str:
    """`open`, `claimed`, `answered`, `returned`, or how a closed one ended: `rerouted`,
    `aborted`, `run_failed`, `joined` (`closed` when none of these)."""
    if escalation.status != Escalation.Status.CLOSED:
        return str(escalation.status)
    return str(escalation.outcome or escalation.status)


def shown_status(status: str, outcome: str) -> str:
    """The status as the queue shows it: a closed escalation says how it closed."""
    if status != Escalation.Status.CLOSED or not outcome:
        return status
    return OUTCOME_WORDS.get(Escalation.Outcome(outcome), status)


def tasks_waiting(escalation: Escalation) -> list[dict[str, Any]]:
    """Every task the escalation's answer is for: its own first, then those that joined, in the
    order they joined. Once it is handled, the tasks that were waiting when it was."""
    rows: list[dict[str, Any]] = [
        {
            "run": escalation.run.key,
            "task": escalation.task.key,
            "agent": escalation.task.agent.name,
            # A draft has no question yet: null, as the escalation's own `question` says.
            "question": (escalation.packet.smallest_unblocking_question or None)
            if escalation.packet
            else None,
            "joined": False,
            "joined_at": None,
            "state": escalation.task.state,
            "id": escalation.task_id,
        }
    ]
    joined = JoinedTask.objects.filter(escalation=escalation).select_related(
        "task", "task__run", "task__agent", "packet"
    )
    if escalation.status in Escalation.OPEN_STATES:
        joined = joined.filter(left_at__isnull=True)
    else:
        joined = joined.filter(left__in=[JoinedTask.Left.WAITING, JoinedTask.Left.ANSWERED])
    for row in joined.order_by("joined_at", "id"):
        rows.append(
            {
                "run": row.task.run.key,
                "task": row.task.key,
                "agent": row.task.agent.name,
                "question": (row.packet.smallest_unblocking_question or None)
                if row.packet
                else None,
                "joined": True,
                "joined_at": row.joined_at,
                "state": row.task.state,
                "id": row.task_id,
            }
        )
    return rows
