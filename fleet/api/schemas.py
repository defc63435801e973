"""The API's response schemas, field for field what its routes return (runs.selectors,
runs.context, the escalation route), and the error body every operation answers with.

Ninja filters a handler's output through its schema: a field missing here vanishes from the JSON.
"""

from datetime import datetime
from typing import Any

from django.db.models import TextChoices
from ninja import Field, Schema

from escalations.models import Escalation
from runs.models import Claim, Decision, Run, Task

# Schemas: the error body every operation answers with.


class ErrorItem(Schema):
    loc: str = Field(description="authorization (401), path (404), or a parameter (422).")
    msg: str


class Errors(Schema):
    """An error: 401 without a valid bearer token (or session), 404 for what is not visible,
    422 for a malformed parameter."""

    errors: list[ErrorItem]


# An operation's documented errors, beside its 200: `response={200: Out, **ERRORS}`.
ERRORS: dict[int, type[Schema]] = {401: Errors, 404: Errors}


def one_of(choices: type[TextChoices], description: str | None = None) -> Any:
    """A string field whose schema lists the model's choices (documented, not re-validated)."""
    return Field(description=description, json_schema_extra={"enum": list(choices.values)})


class TaskRow(Schema):
    """A task of the run, in declaration order."""

    key: str
    title: str
    agent: str
    state: str = one_of(Task.State)
    ready: bool = Field(description="It may start now: pending, in a running run, unblocked.")
    blockers: list[str] = Field(
        description="Open blockers, sorted: prerequisite:<task>, capability:<name>, ..."
    )
    prerequisites: list[str]
    capabilities: list[str]
    reads_state_of: list[str]
    effect: str = one_of(Task.Effect)
    dependency_confidence: str = one_of(Task.Confidence)
    transaction: str | None
    consumes: list[str] = Field(description="Keys of the claims the task builds on.")
    started_at: datetime | None
    finished_at: datetime | None


class BlastRadius(Schema):
    """How far the claim travelled unchecked (DESIGN 9)."""

    agents: int = Field(description="Distinct agents of the affected tasks.")
    artifacts: int = Field(description="Artifacts (PRs, files) the affected tasks reported.")
    minutes: float = Field(description="From post to check, or to now while unchecked.")
    tasks: list[str] = Field(description="Keys of the affected tasks.")


class ClaimRow(Schema):
    """A claim posted in the run, oldest first."""

    key: str
    task: str = Field(description="The task that posted it.")
    statement: str
    load_bearing: bool
    status: str = one_of(Claim.Status)
    reason: str = Field(description="Why it has its status (empty while unverified).")
    posted_at: datetime
    checked_at: datetime | None
    blast_radius: BlastRadius | None


class DecisionRow(Schema):
    """A decision of the run's timeline, with its reason."""

    id: int
    task: str
    attempt: int | None = Field(description="The number of the attempt it decided on.")
    action: str = one_of(Decision.Action)
    reason: str
    cause: str | None = Field(description="The full cause of the failure it answered.")
    not_before: datetime | None
    ground_truth: list[dict[str, Any]] = Field(description="What the next attempt is told.")
    scope: str | None
    reroute_to: str | None
    trip_capability: str | None
    at: datetime
    acted_at: datetime | None


class ProgressRow(Schema):
    """A progress line, e.g. a carry-on naming killed background work."""

    task: str | None
    text: str
    killed: list[str] = Field(description="Background work that was killed.")
    at: datetime


class RunOut(Schema):
    """A run: its tasks with state and blockers, claims, decisions, progress lines, cause."""

    run: str = Field(description="The run's key.")
    fleet: str
    title: str
    policy: str = one_of(Run.Policy)
    state: str = one_of(Run.State)
    cause: str | None = Field(description="The full failure cause, when the run failed.")
    started_at: datetime
    finished_at: datetime | None
    tasks: list[TaskRow]
    claims: list[ClaimRow]
    decisions: list[DecisionRow]
    progress: list[ProgressRow]


class Deferred(Schema):
    """A pending task the frontier holds back, with what it waits on."""

    task: str
    blockers: list[str] = Field(description="e.g. capability:forge, prerequisite:<task>.")


class FrontierOut(Schema):
    """The run's safe ready frontier (empty once the run is over) and its deferred tasks."""

    policy: str = one_of(Run.Policy)
    ready: list[str] = Field(description="Keys of the tasks that may start now.")
    deferred: list[Deferred]


class PreviousAttempt(Schema):
    """The attempt the decision was on: what the next one must differ from."""

    number: int
    agent: str
    prompt_hash: str
    context_hash: str


class ContextOut(Schema):
    """Ground truth for the task's next attempt: the latest decision, its scope, assignment,
    and what the next `task.started` must do for the start gate to let it through."""

    run: str
    task: str
    state: str = one_of(Task.State)
    agent: str = Field(
        description="The agent whose attempt is next (after a reroute, the new one)."
    )
    attempts: int
    blockers: list[str]
    decision: str | None = Field(description="The latest decision's action.")
    decision_id: int | None = Field(description="The latest decision's id (as in the run's).")
    reason: str | None
    ground_truth: list[dict[str, Any]] = Field(
        description="Every piece of ground truth the task was given, oldest first, each once."
    )
    scope: str | None
    not_before: datetime | None
    must_change: list[str] = Field(
        description=(
            "What the next attempt must change, or its task.started is refused with 409 naming "
            'the decision: ["prompt_hash", "context_hash"] after a reframe (at least one of '
            'the two must differ from previous_attempt\'s), ["agent"] after a reroute (it is '
            "started by `agent`, or by an orchestrator naming it in data.agent); [] otherwise."
        ),
        json_schema_extra={"items": {"enum": ["prompt_hash", "context_hash", "agent"]}},
    )
    previous_attempt: PreviousAttempt | None = Field(
        description="The attempt the reframe or reroute decided on (null when nothing must change)."
    )
    refresh: list[str] = Field(
        description=(
            "Capabilities that came back after being down and whose state the task reads: its "
            "next task.started must list each in `refreshed` (having re-read it), or it is "
            "refused with 409 naming the capability."
        )
    )


class AnswerOut(Schema):
    """The reviewer's answer to the packet's question."""

    text: str
    by: str = Field(description="The reviewer's username.")
    at: datetime


class EscalationOut(Schema):
    """An escalation with its failure packet and, once answered, the answer."""

    id: int
    run: str
    task: str
    status: str = one_of(Escalation.Status)
    reason: str = Field(description="Why the work was escalated.")
    opened_at: datetime
    question: str | None = Field(description="The packet's smallest unblocking question.")
    packet: dict[str, Any] | None = Field(description="The failure packet as the agent sent it.")
    claimed_by: str | None = Field(description="The username of the reviewer who claimed it.")
    answer: AnswerOut | None
