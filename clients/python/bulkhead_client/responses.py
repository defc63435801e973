"""Typed answers of the webhook and of the read API (`/api/v1/openapi.json`).

Unknown fields are kept (`extra="allow"`): a newer server adds fields without breaking a client.
"""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Accepted",
    "AnswerOut",
    "BatchResult",
    "BlastRadius",
    "ClaimRow",
    "ContextOut",
    "DecisionRow",
    "Deferred",
    "EscalationOut",
    "EscalationRow",
    "EvidenceCheck",
    "FrontierOut",
    "HaltRow",
    "PreviousAttempt",
    "ProgressRow",
    "RunOut",
    "TaskRow",
    "WaitingEscalation",
]


class Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Accepted(Out):
    """202: the event was applied (or it is the first answer again, for a repeated webhook-id).
    Besides `event` and `type`, each type adds its own fields (`run`, `task`, `attempt`,
    `claim`, `status`, `escalation`, ...): read them with `accepted.get("status")`."""

    event: str
    type: str

    def get(self, name: str) -> Any:
        return (self.model_extra or {}).get(name)


class BatchResult(Out):
    """One event of a batch: its id, the status it got and the body it would have had alone."""

    id: str
    status: int
    body: dict[str, Any]


class HaltRow(Out):
    claim: str
    attempt: int
    reason: str
    at: datetime
    settled_at: datetime | None


class WaitingEscalation(Out):
    id: int
    status: str
    question: str | None
    drafted: bool
    missing: list[str]
    note: str | None
    joined: bool = False  # it joined another task's escalation that asks the same question


class TaskRow(Out):
    key: str
    title: str
    agent: str
    state: str
    ready: bool
    blockers: list[str]
    prerequisites: list[str]
    capabilities: list[str]
    reads_state_of: list[str]
    effect: str
    dependency_confidence: str
    transaction: str | None
    consumes: list[str]
    consumes_declared: bool
    checks: list[str]
    halted: list[HaltRow]
    started_at: datetime | None
    finished_at: datetime | None
    escalation: WaitingEscalation | None


class BlastRadius(Out):
    agents: int
    artifacts: int
    minutes: float
    tasks: list[str]


class ClaimRow(Out):
    key: str
    task: str
    posted_by: str  # agent:<name>, or reviewer:<user> for a reviewer's answer
    statement: str
    subjects: list[str]
    load_bearing: bool
    raised_by: str | None
    status: str
    reason: str
    posted_at: datetime
    checked_at: datetime | None
    blast_radius: BlastRadius | None


class DecisionRow(Out):
    id: int
    task: str
    attempt: int | None
    action: str
    reason: str
    cause: str | None
    not_before: datetime | None
    ground_truth: list[dict[str, Any]]
    scope: str | None
    reroute_to: str | None
    trip_capability: str | None
    at: datetime
    acted_at: datetime | None


class ProgressRow(Out):
    task: str | None
    text: str
    killed: list[str]
    at: datetime


class RunOut(Out):
    run: str
    fleet: str
    title: str
    policy: str
    state: str
    cause: str | None
    started_at: datetime
    finished_at: datetime | None
    tasks: list[TaskRow]
    claims: list[ClaimRow]
    decisions: list[DecisionRow]
    progress: list[ProgressRow]

    def task(self, key: str) -> TaskRow:
        return next(t for t in self.tasks if t.key == key)

    def claim(self, key: str) -> ClaimRow:
        return next(c for c in self.claims if c.key == key)


class Deferred(Out):
    task: str
    blockers: list[str]


class FrontierOut(Out):
    policy: str
    ready: list[str]
    deferred: list[Deferred]


class PreviousAttempt(Out):
    number: int
    agent: str
    prompt_hash: str
    context_hash: str


class ContextOut(Out):
    run: str
    task: str
    state: str
    agent: str
    attempts: int
    blockers: list[str]
    decision: str | None
    decision_id: int | None
    reason: str | None
    ground_truth: list[dict[str, Any]]
    scope: str | None
    not_before: datetime | None
    must_change: list[str]
    previous_attempt: PreviousAttempt | None
    refresh: list[str]


class AnswerOut(Out):
    text: str
    by: str
    at: datetime


class EvidenceCheck(Out):
    status: str
    reason: str
    payload: dict[str, Any] | None


class WaitingTask(Out):
    """A task waiting on an escalation: its own task first, then those that joined it."""

    run: str
    task: str
    agent: str
    question: str | None
    joined: bool
    joined_at: datetime | None


class EscalationOut(Out):
    id: int
    run: str
    task: str
    status: str
    outcome: str  # the status, or how a closed one closed: rerouted, aborted, run_failed, joined
    tasks: list[WaitingTask]  # its own task first, then those that joined it
    reason: str
    opened_at: datetime
    question: str | None
    packet: dict[str, Any] | None
    drafted: bool
    from_draft: list[str]
    checks_pending: bool
    checks: list[EvidenceCheck]
    claimed_by: str | None
    assigned_to: str | None
    tier: int
    due_at: datetime | None
    overdue: bool
    answer: AnswerOut | None
    missing: list[str]
    note: str | None


class EscalationRow(Out):
    """An escalation of a run (`GET /api/v1/runs/<run>/escalations`), newest first."""

    id: int
    task: str
    status: str
    reason: str
    opened_at: datetime
    question: str | None
    drafted: bool
    missing: list[str]
    note: str | None
    answer: AnswerOut | None
