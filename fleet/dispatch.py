"""The webhook's events as service calls: the one place that knows both the events and the services."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from escalations.services import packet as desk_packet
from fleet.errors import ErrorItem
from fleet.events import (
    CapabilityChanged,
    ClaimChecked,
    ClaimPosted,
    EvidenceIn,
    PacketSubmitted,
    Partial,
    RunStarted,
    TaskFinished,
    TaskIn,
    TasksAdded,
    TaskStarted,
)
from fleet.models import Agent
from runs import capabilities, declare, task_state
from runs.bulk import Finishing, Posting
from runs.claims import posting
from runs.specs import ArtifactSpec, ClaimSpec, EvidenceSpec, FailureSpec, Outcome, TaskSpec


@dataclass(frozen=True)
class Context:
    """Who sent an event, for whom it acts, and when it happened: for a live event, when the
    server received it; for an imported one, its envelope's timestamp."""

    sender: Agent
    actor: Agent
    at: datetime
    imported: bool = False

    @property
    def who(self) -> dict[str, Any]:
        return {"actor": self.actor, "at": self.at, "imported": self.imported}


def task_spec(task: TaskIn) -> TaskSpec:
    return TaskSpec(
        key=task.key,
        agent=task.agent,
        title=task.title,
        prerequisites=tuple(task.prerequisites),
        capabilities=tuple(task.capabilities),
        reads_state_of=tuple(task.reads_state_of),
        effect=task.effect,
        dependency_confidence=task.dependency_confidence,
        transaction=task.transaction,
        weight=task.weight,
        consumes=None if task.consumes is None else tuple(task.consumes),
        checks=tuple(task.checks),
    )


def evidence_spec(evidence: EvidenceIn) -> EvidenceSpec:
    return EvidenceSpec(
        kind=evidence.kind,
        source=evidence.source,
        payload_hash=evidence.payload_hash,
        payload=evidence.payload,
        datasource=evidence.datasource,
        workspace=evidence.workspace,
    )


def run_started(context: Context, data: RunStarted) -> dict[str, Any]:
    return declare.run_start(
        **context.who,
        key=data.run,
        title=data.title,
        policy=data.policy,
        tasks=[task_spec(t) for t in data.tasks],
    )


def tasks_added(context: Context, data: TasksAdded) -> dict[str, Any]:
    return declare.tasks_add(**context.who, run=data.run, tasks=[task_spec(t) for t in data.tasks])


def task_started(context: Context, data: TaskStarted) -> dict[str, Any]:
    return task_state.task_start(
        **context.who,
        sender=context.sender,
        run=data.run,
        task=data.task,
        prompt_hash=data.attempt.prompt_hash,
        context_hash=data.attempt.context_hash,
        consumes=tuple(data.consumes),
        refreshed=tuple(data.refreshed),
    )


def claim_spec(data: ClaimPosted) -> ClaimSpec:
    claim = data.claim
    return ClaimSpec(
        key=claim.key,
        statement=claim.statement,
        load_bearing=claim.load_bearing,
        evidence=evidence_spec(claim.evidence) if claim.evidence else None,
        about=tuple(claim.about),
    )


def claim_posted(context: Context, data: ClaimPosted) -> dict[str, Any]:
    return posting.claim_post(
        **context.who, sender=context.sender, run=data.run, task=data.task, claim=claim_spec(data)
    )


def claim_posting(context: Context, data: ClaimPosted) -> Posting:
    """A claim.posted of a batch, for `runs.bulk`."""
    return Posting(
        actor=context.actor,
        at=context.at,
        run=data.run,
        task=data.task,
        claim=claim_spec(data),
        sent_by=posting.sent_by(context.actor, context.sender),
    )


def claim_checked(context: Context, data: ClaimChecked) -> dict[str, Any]:
    return posting.claim_check(
        **context.who,
        sender=context.sender,
        run=data.run,
        task=data.task,
        claim=data.claim,
        verdict=data.verdict,
        evidence=evidence_spec(data.evidence),
    )


def outcome_of(data: TaskFinished) -> Outcome:
    failure = data.failure
    return Outcome(
        outcome=data.outcome,
        failure=(
            FailureSpec(
                kind=failure.kind,
                signature=failure.signature,
                message=failure.message,
                capability=failure.capability,
            )
            if failure
            else None
        ),
        background_killed=tuple(k.task for k in data.background_killed),
        resumable=data.resumable,
        artifacts=tuple(ArtifactSpec(kind=a.kind, ref=a.ref, url=a.url) for a in data.artifacts),
    )


def task_finished(context: Context, data: TaskFinished) -> dict[str, Any]:
    return task_state.task_finish(
        **context.who,
        sender=context.sender,
        run=data.run,
        task=data.task,
        outcome=outcome_of(data),
    )


def task_finishing(context: Context, data: TaskFinished) -> Finishing:
    """A task.finished of a batch, for `runs.bulk`."""
    return Finishing(
        actor=context.actor, at=context.at, run=data.run, task=data.task, outcome=outcome_of(data)
    )


def capability_changed(context: Context, data: CapabilityChanged) -> dict[str, Any]:
    capability = capabilities.capability_change(
        fleet=context.sender.fleet,
        name=data.capability,
        status=data.status,
        reason=data.reason,
        role=data.role,
        by=f"agent:{context.actor.name}",
        at=context.at,
    )
    return {"capability": capability.name, "status": capability.status}


def packet_submitted(context: Context, data: PacketSubmitted) -> dict[str, Any]:
    return desk_packet.packet_submit(
        actor=context.actor,
        sender=context.sender,
        at=context.at,
        run=data.run,
        task=data.task,
        packet=data.packet,
    )


Handler = Callable[[Context, Any], dict[str, Any]]

HANDLERS: Mapping[str, Handler] = {
    "run.started": run_started,
    "tasks.added": tasks_added,
    "task.started": task_started,
    "claim.posted": claim_posted,
    "claim.checked": claim_checked,
    "task.finished": task_finished,
    "capability.changed": capability_changed,
    "packet.submitted": packet_submitted,
}


def reference_errors(agent: Agent, partial: Partial) -> list[ErrorItem]:
    """What a refused event's valid parts refer to that does not exist, or a packet's errors."""
    fields = partial.fields
    errors = declare.reference_errors(
        fleet_id=agent.fleet_id,
        event_type=partial.type,
        run=fields.get("run"),
        task=fields.get("task"),
        claim=fields.get("claim"),
        tasks=tuple(
            (i, task_spec(spec) if spec is not None else None, key)
            for i, spec, key in partial.tasks
        ),
    )
    if partial.type == "packet.submitted" and "packet" in fields:
        errors += desk_packet.packet_errors(fields["packet"], fields.get("task"))
    return errors
