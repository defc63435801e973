"""What Bulkhead recorded of a task (its attempts, its claims and their checked evidence), as the
draft packet and the packet page read it."""

from typing import Any

from django.db.models import Q

from escalations.models import Escalation
from escalations.packet_draft import AttemptFacts, Draft, RefutedClaim, build_failure_packet
from runs.claims.hashing import HUMAN_ANSWER
from runs.models import Attempt, Claim, ClaimUse, Decision, Evidence, Task


def claims_of_task(task: Task) -> list[Claim]:
    """The claims a task posted, and those it consumed or declared it would."""
    used = ClaimUse.objects.filter(task=task).values_list("claim_id", flat=True)
    return list(
        Claim.objects.filter(
            Q(task=task) | Q(run_id=task.run_id, key__in=list(task.consumes)) | Q(pk__in=used)
        )
        .select_related("task", "run")
        .prefetch_related("evidence")
        .order_by("posted_at", "id")
    )


def attempt_facts(task: Task) -> list[AttemptFacts]:
    """Each attempt of the task, oldest first, with the decisions taken after it."""
    decided: dict[int, list[tuple[str, str]]] = {}
    for attempt_id, action, reason in (
        Decision.objects.filter(task=task, attempt__isnull=False)
        .order_by("created_at", "id")
        .values_list("attempt_id", "action", "reason")
    ):
        decided.setdefault(attempt_id, []).append((action, reason))
    return [
        AttemptFacts(
            number=a.number,
            agent=a.agent.name,
            prompt_hash=a.prompt_hash,
            context_hash=a.context_hash,
            outcome=a.outcome,
            failure_kind=a.failure_kind,
            failure_signature=a.failure_signature,
            failure_message=a.failure_message,
            decisions=tuple(decided.get(a.pk, ())),
        )
        for a in Attempt.objects.filter(task=task).select_related("agent").order_by("number")
    ]


def checked_evidence(claims: list[Claim]) -> list[dict[str, Any]]:
    """Evidence a verifier has judged, oldest first: what reality gave when it refuted a claim,
    evidence it verified, and consumers' checks it accepted. Never an agent's text or a person's
    answer (a reviewer's answer is the task's ground truth, not the agent's evidence)."""
    judged = (
        Q(role=Evidence.Role.REALITY)
        | Q(role=Evidence.Role.POSTED, verdict=Claim.Status.VERIFIED)
        | Q(role=Evidence.Role.CHECK, verdict_reason__startswith="accepted")
    )
    rows = (
        Evidence.objects.filter(claim__in=claims)
        .filter(judged)
        .exclude(kind=HUMAN_ANSWER)
        .exclude(source__istartswith="agent:")
        .order_by("created_at", "id")
    )
    return [
        {
            "kind": row.kind,
            "source": row.source,
            "payload_hash": row.payload_hash,
            "payload": row.payload,
            "datasource": row.datasource or None,
            "workspace": row.workspace or None,
        }
        for row in rows
    ]


def draft_for(task: Task) -> Draft:
    """The packet the record supports for `task` (see `escalations.packet_draft`)."""
    claims = claims_of_task(task)
    refuted = [
        RefutedClaim(key=c.key, statement=c.statement, how=c.status_reason)
        for c in claims
        if c.status == Claim.Status.REFUTED
    ]
    return build_failure_packet(
        attempt_facts(task), task=task.key, refuted=refuted, evidence=checked_evidence(claims)
    )


def ending(outcome: str, *, last: bool, state: str, escalated: bool = False) -> dict[str, str]:
    """How an attempt ended (`outcome`, a badge's key) in words (`outcome_label`): one with no
    outcome runs only while it is its task's latest and the task runs; one that opened an
    escalation (`escalated`), or the latest of a task that waits on one, stopped with its packet
    (a packet ends an attempt, no task.finished), also once a reviewer acted on it."""
    if outcome:
        return {"outcome": outcome, "outcome_label": outcome}
    if last and state == Task.State.RUNNING:
        return {"outcome": "running", "outcome_label": "running"}
    if escalated or (last and state == Task.State.ESCALATED):
        return {"outcome": "stopped", "outcome_label": "stopped with a packet"}
    return {"outcome": "unreported", "outcome_label": "ended, not reported"}


def recorded_attempts(task: Task, tried: list[str]) -> dict[str, Any]:
    """The attempts as Bulkhead recorded them, to read beside the agent's `tried`: whether each
    one's prompt and context changed, how it ended, what was decided; and where the record and
    the agent's account disagree on their face."""
    facts = attempt_facts(task)
    escalated = set(Escalation.objects.filter(task=task).values_list("attempt_number", flat=True))
    rows: list[dict[str, Any]] = []
    for i, a in enumerate(facts):
        previous = facts[i - 1] if i else None
        rows.append(
            {
                "number": a.number,
                "agent": a.agent,
                "prompt_hash": a.prompt_hash,
                "context_hash": a.context_hash,
                "prompt_changed": previous is not None and a.prompt_hash != previous.prompt_hash,
                "context_changed": previous is not None and a.context_hash != previous.context_hash,
                "agent_changed": previous is not None and a.agent != previous.agent,
                "first": previous is None,
                **ending(
                    a.outcome,
                    last=i == len(facts) - 1,
                    state=task.state,
                    escalated=a.number in escalated,
                ),
                "failure": ", ".join(x for x in (a.failure_kind, a.failure_signature) if x),
                "decisions": [{"action": d, "reason": r} for d, r in a.decisions],
            }
        )
    notes = []
    if tried and len(tried) != len(facts):
        notes.append(
            f"The agent lists {len(tried)} tr{'y' if len(tried) == 1 else 'ies'}; Bulkhead "
            f"recorded {len(facts)} attempt{'' if len(facts) == 1 else 's'}."
        )
    for row, before in zip(rows[1:], rows, strict=False):  # each attempt and the one before
        changed_on = [d["action"] for d in before["decisions"] if d["action"] in CHANGES]
        if changed_on and not row["prompt_changed"] and not row["context_changed"]:
            notes.append(
                f"Attempt {row['number']} came after a {changed_on[-1]} but had the same prompt "
                f"and context as attempt {before['number']}."
            )
    return {"rows": rows, "notes": notes}


# Decisions whose next attempt should differ from the one before (what changes is the point).
CHANGES = ("reframe", "reroute")
