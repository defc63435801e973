"""Typed `data` of every event an agent sends, and of every notification Bulkhead sends back.

The field names, types and defaults are the webhook's (`/api/v1/openapi.json` describes each event
type as a schema); a test in the server's suite compares the two so that they cannot drift.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EVENT_MODELS",
    "NOTIFICATION_TYPES",
    "Artifact",
    "Attempt",
    "CapabilityChanged",
    "Claim",
    "ClaimChecked",
    "ClaimPosted",
    "Effect",
    "Evidence",
    "EvidenceKind",
    "Failure",
    "FailureKind",
    "Killed",
    "Notification",
    "Packet",
    "PacketSubmitted",
    "RuledOut",
    "RunStarted",
    "Task",
    "TaskFinished",
    "TaskStarted",
    "TasksAdded",
]

EvidenceKind = Literal["query_result", "file_read", "http_exchange", "test_run"]
FailureKind = Literal["transient", "reasoning", "spec", "environment", "error"]
Effect = Literal["none", "reversible", "external"]


class Data(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON object sent: fields left at None are left out (absent is the default)."""
        return self.model_dump(mode="json", exclude_none=True)


class Task(Data):
    """A task of a run's declaration."""

    key: str
    title: str = ""
    agent: str
    prerequisites: list[str] = []
    capabilities: list[str] = []
    reads_state_of: list[str] = []
    effect: Effect = "none"
    dependency_confidence: Literal["declared", "uncertain"] = "declared"
    transaction: str | None = None
    weight: int = 1
    # None (absent): it consumes its prerequisites' claims; a list, even [], replaces them.
    consumes: list[str] | None = None
    checks: list[str] = []


class Evidence(Data):
    """What points outside the conversation; build it with `bulkhead_client.evidence`."""

    kind: EvidenceKind
    source: str
    payload_hash: str
    payload: dict[str, Any] | None = None
    datasource: str | None = None
    workspace: str | None = None


class ActingAs(Data):
    agent: str | None = None  # an orchestrator acts for another agent of its fleet


class RunStarted(ActingAs):
    run: str
    title: str = ""
    policy: Literal["scoped", "global_halt"] = "scoped"
    tasks: list[Task]


class TasksAdded(ActingAs):
    run: str
    tasks: list[Task] = Field(min_length=1)


class Attempt(Data):
    prompt_hash: str
    context_hash: str


class TaskStarted(ActingAs):
    run: str
    task: str
    attempt: Attempt
    consumes: list[str] = []
    refreshed: list[str] = []


class Claim(Data):
    key: str
    statement: str
    load_bearing: bool = True
    about: list[str] = []
    evidence: Evidence | None = None


class ClaimPosted(ActingAs):
    run: str
    task: str
    claim: Claim


class ClaimChecked(ActingAs):
    run: str
    task: str
    claim: str
    verdict: Literal["verified", "refuted"]
    evidence: Evidence


class Failure(Data):
    kind: FailureKind
    signature: str
    message: str = ""
    capability: str | None = None


class Killed(Data):
    task: str


class Artifact(Data):
    kind: str
    ref: str
    url: str | None = None


class TaskFinished(ActingAs):
    run: str
    task: str
    outcome: Literal["succeeded", "failed"]
    failure: Failure | None = None
    background_killed: list[Killed] = []
    resumable: bool = False
    artifacts: list[Artifact] = []


class CapabilityChanged(ActingAs):
    capability: str
    status: Literal["up", "down"]
    reason: str = ""
    role: Literal["authority", "observability", "rollback"] | None = None


class RuledOut(Data):
    hypothesis: str
    how: str


class Packet(Data):
    """A failure packet. After Bulkhead drafted one (`packet.requested`), send only what is
    missing: the fields left at None are taken from the draft."""

    task: str | None = None
    tried: list[str] | None = None
    ruled_out: list[RuledOut] | None = None
    evidence: list[Evidence] | None = None
    smallest_unblocking_question: str | None = None
    options: list[str] | None = None
    urgency: Literal["low", "normal", "high"] | None = None  # sets the escalation's due time
    dedup_key: str | None = None  # your name for the question: the same key joins its escalation


class PacketSubmitted(ActingAs):
    run: str
    task: str
    packet: dict[str, Any]


EVENT_MODELS: dict[str, type[Data]] = {
    "run.started": RunStarted,
    "tasks.added": TasksAdded,
    "task.started": TaskStarted,
    "claim.posted": ClaimPosted,
    "claim.checked": ClaimChecked,
    "task.finished": TaskFinished,
    "capability.changed": CapabilityChanged,
    "packet.submitted": PacketSubmitted,
}

NOTIFICATION_TYPES = (
    "task.ready",
    "task.deferred",
    "task.reframed",
    "task.rerouted",
    "task.resume",
    "task.retry",
    "task.halted",
    "packet.requested",
    "packet.returned",
    "escalation.opened",
    "escalation.answered",
    "run.succeeded",
    "run.failed",
)


class Notification(BaseModel):
    """A signed notification to the fleet's callback. `data` always has `run`; most types also
    `task` and `agent`; `task.reframed` and `task.halted` carry `ground_truth`,
    `escalation.answered` the `answer`, `packet.requested` the `missing` fields and the `draft`."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="The delivery's webhook-id: the same on every re-send.")
    type: str
    timestamp: str
    data: dict[str, Any]

    @property
    def run(self) -> str | None:
        return self.data.get("run")

    @property
    def task(self) -> str | None:
        return self.data.get("task")
