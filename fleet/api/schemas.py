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


class HaltRow(Schema):
    """A claim refuted while the task was running on it (`task.halted`)."""

    claim: str = Field(description="The claim's key: settled when a claim under it is verified.")
    attempt: int = Field(description="The attempt that was running on it.")
    reason: str
    at: datetime
    settled_at: datetime | None = Field(
        description="When the claim was verified again or a reviewer's answer took its key."
    )


class WaitingEscalation(Schema):
    """The task's escalation while it waits: on a reviewer, or on the agent's (better) packet."""

    id: int = Field(description="GET /api/v1/escalations/<id> has its packet.")
    status: str = Field(
        description="open or claimed (a reviewer has it), or returned (the agent sends a better "
        "packet).",
        json_schema_extra={"enum": ["open", "claimed", "returned"]},
    )
    question: str | None = Field(
        description="The packet's smallest unblocking question; null while the packet is "
        "Bulkhead's draft, which leaves the question to the agent."
    )
    drafted: bool = Field(
        description="The packet is Bulkhead's draft from the attempts; the agent's replaces it."
    )
    missing: list[str] = Field(
        description="What the agent still has to send in packet.submitted: the draft's missing "
        "fields (smallest_unblocking_question, and tried or evidence if Bulkhead had none), or "
        "the field a reviewer returned the packet for."
    )
    note: str | None = Field(description="The reviewer's note, when the packet was returned.")
    joined: bool = Field(
        default=False,
        description="The task's packet asked the question another task's escalation already "
        "asked, so the task waits on that escalation (its id here): one answer releases both.",
    )


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
    consumes: list[str] = Field(description="Keys of the claims the task names in `consumes`.")
    consumes_declared: bool = Field(
        description="True: it consumes exactly `consumes` (its declaration named the list, even "
        "[]). False: also every claim posted by the tasks it depends on, directly or not."
    )
    checks: list[str] = Field(
        description="Claims it exists to check: they never block it, unverified or not."
    )
    halted: list[HaltRow] = Field(
        description="Claims refuted while it was running on them: until each is settled, its "
        "dependants (and its next attempt) wait with claim:<key>."
    )
    started_at: datetime | None
    finished_at: datetime | None
    escalation: WaitingEscalation | None = Field(
        description="The task's waiting escalation, if it has one."
    )


class BlastRadius(Schema):
    """How far the claim travelled unchecked: the agents, artifacts and minutes it reached."""

    agents: int = Field(description="Distinct agents of the affected tasks.")
    artifacts: int = Field(
        description="Artifacts (PRs, files) the affected tasks reported while the claim was "
        "unchecked: up to its check (never checked: up to now, or to the run's end once it is over)."
    )
    minutes: float = Field(
        description="From post to check; never checked, to now while the run goes on, and to "
        "the run's end once it is over."
    )
    tasks: list[str] = Field(description="Keys of the affected tasks.")


class ClaimRow(Schema):
    """A claim posted in the run, oldest first."""

    key: str
    task: str = Field(
        description="The task that posted it (for a reviewer's answer: the task answered)."
    )
    posted_by: str = Field(
        description="Who posted it: 'agent:<name>', or 'reviewer:<user>' for a reviewer's answer."
    )
    statement: str
    subjects: list[str] = Field(
        description="What it is about: its `about`, and its statement's code spans that name a "
        "thing no `about` entry names. Evidence verifies it only if it mentions each."
    )
    load_bearing: bool
    raised_by: str | None = Field(
        description="Who made it load-bearing after its producer posted it as not: "
        "'consumed by <tasks>', 'named by <task> on task.started' or 'reviewer:<user>'."
    )
    status: str = one_of(Claim.Status)
    reason: str = Field(description="Why it has its status (empty while unverified).")
    posted_at: datetime
    checked_at: datetime | None = Field(
        description="When it was first checked, verified or refuted (null while never checked): "
        "where its blast radius ends. A later verdict (a verified claim refuted after, say) "
        "changes `status` and `reason`, which names who gave it, not this time."
    )
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


class WhatIfPolicy(Schema):
    """What one policy would do to the run through the outage and after it."""

    useful: int = Field(description="Weight of the work done validly during the outage.")
    useful_tasks: int = Field(description="How many tasks were done validly during the outage.")
    during_outage: list[str] = Field(
        description="Keys of the tasks it would do validly in the outage."
    )
    invalid: int = Field(description="Executions whose conditions were false (or built on one).")
    invalid_tasks: list[str]
    rework: int = Field(description="Invalid work found after restoration and done again.")
    completed_after_restoration: int = Field(description="Tasks first done after restoration.")
    steps_to_completion: int = Field(description="Scheduling steps from now to the run's end.")
    recovery_steps: int = Field(description="Of those, the steps after restoration.")
    completed: bool = Field(description="Whether the run's work would all be done.")
    localized_blockers: int = Field(description="Tasks held by a blocker of their own.")
    run_wide_blockers: int = Field(description="Tasks held by a run-wide halt.")


class WhatIfOut(Schema):
    """The policy lab on the run's own graph from its current state: nothing is scheduled."""

    run: str
    down: list[str] = Field(description="The capabilities down in the what-if.")
    already_down: list[str] = Field(
        description="Capabilities down now that the what-if did not name: they stay down in it."
    )
    steps: int
    to_do: int = Field(description="The run's tasks not done yet.")
    policies: dict[str, WhatIfPolicy] = Field(
        description="global_halt and scoped; naive ignores the outage: what would be invalid."
    )
    hash: str = Field(description="sha256 of the canonical JSON of `policies`.")


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


class EvidenceCheck(Schema):
    """What Bulkhead's re-check of one packet evidence entry found, in the entries' order."""

    status: str = Field(
        description="verified (reality matches its hash), refuted (it differs) or unverified "
        "(nothing could re-check it; reason says why).",
        json_schema_extra={"enum": ["verified", "refuted", "unverified"]},
    )
    reason: str
    payload: dict[str, Any] | None = Field(
        description="What reality gave (rows, lines, exit code, status), cut when long; null "
        "when nothing was read."
    )


class WaitingTask(Schema):
    """A task the escalation's answer is for."""

    run: str
    task: str
    agent: str
    question: str | None = Field(description="The question as this task's packet asked it.")
    joined: bool = Field(
        description="False for the task that opened the escalation; true for a task whose "
        "packet asked the same question (same words once case, spacing and punctuation are set "
        "aside, or the same dedup_key) and joined it."
    )
    joined_at: datetime | None


class EscalationOut(Schema):
    """An escalation with its failure packet and, once answered, the answer."""

    id: int
    run: str
    task: str
    status: str = one_of(Escalation.Status)
    outcome: str = Field(
        description="The status, or for a closed escalation how it closed: rerouted (the task "
        "went to another agent), aborted (the task was stopped and its run failed), run_failed "
        "(closed because another abort failed its run), joined (its task waits on an older "
        "escalation with the same question), or closed.",
        json_schema_extra={
            "enum": [*Escalation.Status.values, "rerouted", "aborted", "run_failed", "joined"]
        },
    )
    tasks: list[WaitingTask] = Field(
        description="Every task waiting on the answer, this escalation's own task first (once "
        "answered: the tasks the answer was for)."
    )
    reason: str = Field(description="Why the work was escalated.")
    opened_at: datetime
    question: str | None = Field(description="The packet's smallest unblocking question.")
    packet: dict[str, Any] | None = Field(
        description="The failure packet: as the agent sent it, with any field it left to "
        "Bulkhead's draft filled in from the draft; or Bulkhead's draft itself."
    )
    drafted: bool = Field(
        description="The packet is Bulkhead's draft from the attempts (its question is empty)."
    )
    from_draft: list[str] = Field(
        description="Fields of the agent's packet taken from Bulkhead's draft."
    )
    checks_pending: bool = Field(description="The packet's evidence is being re-checked.")
    checks: list[EvidenceCheck] = Field(
        description="The re-check of each evidence entry, in order (empty while pending)."
    )
    claimed_by: str | None = Field(description="The username of the reviewer who claimed it.")
    assigned_to: str | None = Field(
        description="The username of the reviewer it is assigned to (by the fleet's routing "
        "rules, a hand-off or a tier); null when nobody is, e.g. once it reached the managers."
    )
    tier: int = Field(description="1, then 2 and so on each time it was overdue and moved up.")
    due_at: datetime | None = Field(
        description="When the fleet wants it answered; null: no due time."
    )
    overdue: bool = Field(
        description="Still waiting past its due time (it is never answered for it)."
    )
    answer: AnswerOut | None
    missing: list[str] = Field(
        description="What the agent still has to send in packet.submitted: the draft's missing "
        "fields while the packet is Bulkhead's draft, or the field a reviewer returned the "
        "packet for (empty otherwise)."
    )
    note: str | None = Field(description="The reviewer's note, when the packet was returned.")


class EscalationRow(Schema):
    """An escalation of the run, newest first."""

    id: int = Field(description="GET /api/v1/escalations/<id> has its packet and checks.")
    task: str
    status: str = one_of(Escalation.Status)
    reason: str = Field(description="Why the work was escalated.")
    opened_at: datetime
    question: str | None = Field(
        description="The packet's smallest unblocking question; null while the packet is "
        "Bulkhead's draft."
    )
    drafted: bool = Field(description="The packet is Bulkhead's draft from the attempts.")
    missing: list[str] = Field(
        description="What the agent still has to send (the draft's missing fields, or the field "
        "a reviewer returned the packet for)."
    )
    note: str | None = Field(description="The reviewer's note, when the packet was returned.")
    answer: AnswerOut | None = Field(description="The reviewer's answer, once answered.")
