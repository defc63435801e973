"""Claims as agents hand them over: posted by a producer, checked by a consumer (claim.checked)."""

from datetime import datetime
from typing import Any

from django.db.models import BooleanField

from fleet import rows
from fleet.errors import Refusal, error
from fleet.models import Agent
from runs import scheduler
from runs.claims import consumers
from runs.claims.bearing import NO_SUBJECT, subjects_of
from runs.claims.circular import AGENT_TEXT, cites_an_agent
from runs.models import Claim, ClaimUse, Evidence, Run, Task
from runs.ownership import (
    fact,
    find_task,
    refuse_unless_own,
    run_and_task,
    run_for,
    unknown_task,
)
from runs.specs import ClaimSpec, EvidenceSpec


def evidence_of(
    evidence: EvidenceSpec, *, role: str, by: str, task_id: int, at: datetime
) -> Evidence:
    """The evidence's row, not written yet and not tied to its claim yet."""
    return Evidence(
        role=role,
        kind=evidence.kind,
        source=evidence.source,
        payload_hash=evidence.payload_hash,
        payload=evidence.payload,
        datasource=evidence.datasource or "",
        workspace=evidence.workspace or "",
        submitted_by=by,
        task_id=task_id,
        created_at=at,
    )


def evidence_row(
    claim: Claim,
    evidence: EvidenceSpec,
    *,
    role: str,
    by: str,
    task: Task,
    at: datetime,
    sent_by: str = "",
) -> Evidence:
    row = evidence_of(evidence, role=role, by=by, task_id=task.pk, at=at)
    row.claim = claim
    row.sent_by = sent_by
    row.save(force_insert=True)
    return row


def sent_by(actor: Agent, sender: Agent | None) -> str:
    """The orchestrator that sent an event for `actor` (data.agent), or "": a claim it posted
    for another agent is still its own when it checks it."""
    return f"agent:{sender.name}" if sender is not None and sender.pk != actor.pk else ""


def posted_reason(evidence: EvidenceSpec | None, *, imported: bool, subjects: bool) -> str:
    if evidence is None:
        return "posted without evidence"
    if cites_an_agent(evidence.source):
        return AGENT_TEXT
    if imported:
        return "imported: its evidence is recorded as posted, not re-checked"
    if not subjects:
        return NO_SUBJECT  # no evidence can bear on it: nothing to re-check
    return "waiting for a verifier"


def claim_post(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    claim: ClaimSpec,
    sender: Agent | None = None,
    imported: bool = False,
) -> dict[str, Any]:
    """A producer's claim: unverified until a verifier checks its evidence against reality."""
    row = run_and_task(  # posting a claim does not change the task: no lock
        actor.fleet_id,
        run,
        task,
        lock=False,
        claim_taken=fact(
            "EXISTS(SELECT 1 FROM runs_claim c WHERE c.run_id = {run} AND c.key = %s)",
            BooleanField(),
            claim.key,
        ),
        others_running=fact(
            "EXISTS(SELECT 1 FROM runs_task o WHERE o.run_id = {run} AND o.state = %s"
            " AND o.id <> {task})",
            BooleanField(),
            Task.State.RUNNING,
        ),
    )
    found = row.run
    refuse_unless_own(task=row, actor=actor, sender=sender, imported=imported)
    existing = (
        rows.one(Claim.objects.filter(run=found, key=claim.key).select_related("run", "task"))
        if getattr(row, "claim_taken", True)
        else None
    )
    if existing is not None:
        if existing.task_id != row.pk:  # another task's claim: its key is what is wrong
            msg = f"claim {claim.key!r} was already posted by task {existing.task.key!r}"
            raise Refusal([error("data.claim.key", msg)], 409)
        refuse_lowering(existing, claim)
        raise Refusal([error("data.claim.key", f"claim {claim.key!r} was already posted")], 409)
    evidence = claim.evidence
    subjects = subjects_of(claim.about, claim.statement)
    reason = posted_reason(evidence, imported=imported, subjects=bool(subjects))
    checkable = evidence is not None and not cites_an_agent(evidence.source) and bool(subjects)
    by = f"agent:{actor.name}"
    posted = rows.new(
        Claim,
        run_id=found.pk,
        task_id=row.pk,
        key=claim.key,
        statement=claim.statement,
        load_bearing=claim.load_bearing,
        about=list(claim.about),
        posted_by=by,
        sent_by=sent_by(actor, sender),
        posted_at=at,
        status_reason=reason,
        # An imported claim is history: what checked it, if anything, is in the file.
        verification_pending=checkable and not imported,
    )
    rows.add(posted)
    posted._state.fields_cache.update(run=found, task=row)
    if evidence is not None:
        posted_evidence = evidence_row(
            posted, evidence, role="posted", by=by, task=row, at=at, sent_by=posted.sent_by
        )
        # Never re-checked: another agent's text, or a claim no evidence can bear on.
        agent_text = cites_an_agent(evidence.source)
        if agent_text or (not subjects and not imported):
            posted_evidence.verdict = Claim.Status.UNVERIFIED
            posted_evidence.verdict_reason = AGENT_TEXT if agent_text else NO_SUBJECT
            posted_evidence.save(update_fields=["verdict", "verdict_reason"])
    if getattr(
        row, "others_running", True
    ):  # else what consumes it waits for its producer: no use yet
        consumers.record_running_uses(posted, at, imported=imported)
    answer: dict[str, Any] = {
        "run": found.key,
        "claim": posted.key,
        "status": posted.status,
        "reason": reason,
    }
    if not imported and consumers.raise_if_consumed([posted]):
        answer["load_bearing"] = True
        answer["raised"] = posted.raised_by
    if posted.verification_pending:
        scheduler.verify_after_commit(posted)
    # What its status can hold (its named consumers, checkers, tasks halted on it, and through
    # its producer the implicit ones) is found by the recompute, which reads the run anyway.
    # A running producer's claim holds back nothing that is ready: what consumes it implicitly
    # waits for the producer, and a task naming it waited for it to be posted.
    may_hold = row.state != Task.State.RUNNING
    scheduler.mark_changed(found, [row.key], claim=posted.key, may_hold=may_hold)
    return answer


def refuse_lowering(existing: Claim, claim: ClaimSpec) -> None:
    """A claim someone consumes stays load-bearing: posting it again as not is a 409 naming them."""
    if claim.load_bearing or not existing.load_bearing:
        return
    users = consumers.users(existing)
    if users:
        raise Refusal(
            [
                error(
                    "data.claim.load_bearing",
                    f"{existing.key} is load-bearing and consumed by {', '.join(users)}: "
                    "load_bearing can be raised, never lowered once a task consumes it",
                )
            ],
            409,
        )


def record_checker_use(claim: Claim, task: Task, at: datetime) -> None:
    """The checker read the claim to check it: from when it had both its task and the claim.
    A task that never started used nothing (its agent checked before starting it): no use, so
    it is not in the claim's blast radius."""
    if task.pk == claim.task_id or task.started_at is None:
        return
    since = max(task.started_at, claim.posted_at)
    ClaimUse.objects.get_or_create(claim=claim, task=task, defaults={"at": since, "by_check": True})


def claim_check(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    claim: str,
    verdict: str,
    evidence: EvidenceSpec,
    sender: Agent | None = None,
    imported: bool = False,
) -> dict[str, Any]:
    """A consumer's verdict: recorded now, accepted only once the verifier confirms its evidence."""
    found = run_for(actor.fleet_id, run)
    checker_task = find_task(found, task)
    if checker_task is not None:  # the checking task: the consumer's
        refuse_unless_own(task=checker_task, actor=actor, sender=sender, imported=imported)
    checked = rows.one(Claim.objects.select_for_update().filter(run=found, key=claim))
    agent_text = cites_an_agent(evidence.source)
    errors = [] if checker_task is not None else [unknown_task(found, task)]
    if checked is None:
        errors.append(error("data.claim", f"unknown claim {claim!r} in run {found.key!r}"))
    if agent_text and not imported:
        errors.append(
            error(
                "data.evidence.source",
                "another agent's text is not evidence: cite a query, a file, a test run or an HTTP exchange",
            )
        )
    unrelated = (
        checker_task is not None
        and checked is not None
        and not imported
        and not may_check(checked, checker_task)
    )
    if unrelated:
        assert checker_task is not None and checked is not None
        errors.append(
            error(
                "data.task",
                f"task {checker_task.key!r} neither consumes nor checks claim {checked.key!r}: "
                "a claim is checked by a task that builds on it, or one declared to check it "
                "(`checks` in its spec)",
            )
        )
    if errors:
        raise Refusal(errors)
    assert checker_task is not None and checked is not None
    row = evidence_row(
        checked,
        evidence,
        role="check",
        by=f"agent:{actor.name}",
        task=checker_task,
        at=at,
        sent_by=sent_by(actor, sender),
    )
    row.verdict = verdict  # the checker's verdict; the verifier's judgement goes in the reason
    record_checker_use(checked, checker_task, at)
    if imported:
        return record_imported_check(found, checked, row, agent_text, at)
    row.save(update_fields=["verdict"])
    checked.verification_pending = True
    checked.save(update_fields=["verification_pending"])
    scheduler.verify_after_commit(checked)
    return {
        "run": found.key,
        "claim": checked.key,
        "status": checked.status,
        "verdict": "pending verification",
    }


def may_check(claim: Claim, task: Task) -> bool:
    """A task checks a claim it builds on (it consumes it, or named it when it started) or one
    it is declared to check (`checks`); its producer's own check is judged circular later. An
    unrelated task's verdict would halt, reframe or release work it has no part in."""
    if claim.key in task.checks or claim.key in task.consumes or task.pk == claim.task_id:
        return True
    if ClaimUse.objects.filter(claim=claim, task=task).exists():
        return True
    if task.consumes_declared or claim.superseded:
        return False
    # It consumes implicitly what the tasks above it posted: its producer is among them (a walk
    # up from the task, reading its ancestors, not the run).
    above = consumers.reach(task.pk, down=False)
    return Task.objects.filter(pk=claim.task_id).filter(pk__in=above).exists()


def record_imported_check(
    run: Run, claim: Claim, row: Evidence, agent_text: bool, at: datetime
) -> dict[str, Any]:
    """A past run's verdict is recorded as it happened, at its time: it is not re-checked now."""
    accepted = not agent_text and not claim.checked_by.startswith("reviewer:")
    row.verdict_reason = (
        "accepted: imported, recorded as it happened"
        if accepted
        else "not accepted: " + (AGENT_TEXT if agent_text else "a reviewer checked it by hand")
    )
    row.save(update_fields=["verdict", "verdict_reason"])
    if accepted and claim.status != row.verdict:
        claim.status = row.verdict
        claim.checked_at = claim.checked_at or max(at, claim.posted_at)
        claim.checked_by = row.submitted_by
        claim.status_reason = f"{row.verdict} by {row.submitted_by} (imported)"
        claim.save(update_fields=["status", "checked_at", "checked_by", "status_reason"])
        consumers.claim_changed(claim)
    return {"run": run.key, "claim": claim.key, "status": claim.status, "verdict": row.verdict}
