"""Verifying a claim's evidence with the fleet's sources, and recording what reality said.

The verifiers run outside any transaction (they touch databases, files, hosts and commands, and
may take seconds); their verdicts are then recorded in one transaction that locks the claim,
judges only evidence nobody has judged yet, and asks the scheduler to recompute the claim's
consumers. Running twice is harmless: the second run finds nothing left to judge.

Two kinds of evidence reach the verifier:

- a claim's own (`posted`) evidence: reality matches its hash, the claim is verified; it differs,
  the claim is refuted and the real payload is kept as a `reality` row, the ground truth of the
  producing task's next attempt; no verifier can reach it, the claim stays unverified with the
  reason. It decides only a claim that is still unverified.
- a consumer's check (`claim.checked`): its verdict is accepted only when the verifier confirms
  the evidence (reality matches the checker's hash) and the verdict follows from it (see
  `accepts`). A verdict that is not accepted is recorded on its evidence row and in the claim's
  reason, and changes nothing else.

A reviewer's verdict (`checked_by` "reviewer:...") is final: the verifier never overturns it.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.models import VerificationSource
from runs import retries, scheduler
from runs.evidence import HUMAN_ANSWER, payload_hash
from runs.models import Claim, Evidence
from runs.posting import consumers_of
from runs.verifiers import DEFAULT_LIMITS, Limits, Sources, Verdict, verify

VERIFIER: Final = "verifier"
REASON_LENGTH: Final = 500  # Claim.status_reason and Evidence.verdict_reason


def clip(text: str, limit: int = REASON_LENGTH) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def limits() -> Limits:
    """The verifiers' limits, with a command timeout that ends before the task's soft time limit."""
    soft = float(getattr(settings, "CELERY_TASK_SOFT_TIME_LIMIT", 100) or 100)
    return Limits(command_timeout=max(1.0, min(DEFAULT_LIMITS.command_timeout, soft * 0.8)))


def sources_for(fleet_id: int) -> Sources:
    """The fleet's registered verification sources as the verifiers' plain values."""
    found: dict[str, dict[str, str]] = {kind: {} for kind in VerificationSource.Kind.values}
    for kind, name, value in VerificationSource.objects.filter(fleet_id=fleet_id).values_list(
        "kind", "name", "value"
    ):
        found[kind][name] = value
    return Sources(
        datasources=found[VerificationSource.Kind.DATASOURCE],
        workspaces=found[VerificationSource.Kind.WORKSPACE],
        hosts=frozenset(found[VerificationSource.Kind.HOST].values()),
        commands=frozenset(found[VerificationSource.Kind.COMMAND].values()),
    )


def unjudged(claim_id: int) -> Any:
    """Evidence of the claim that a verifier has still to judge, oldest first."""
    posted = Q(role=Evidence.Role.POSTED, verdict="")
    checked = Q(role=Evidence.Role.CHECK, verdict_reason="") & ~Q(kind=HUMAN_ANSWER)
    return (
        Evidence.objects.filter(claim_id=claim_id)
        .filter(posted | checked)
        .exclude(source__startswith="agent:")
        .order_by("created_at", "id")
    )


def as_evidence(row: Evidence) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "source": row.source,
        "payload_hash": row.payload_hash,
        "payload": row.payload,
        "datasource": row.datasource or None,
        "workspace": row.workspace or None,
    }


def verify_claim(claim_id: int, *, with_limits: Limits | None = None) -> None:
    """Re-check the claim's unjudged evidence against reality and record the verdicts.

    One re-check of a claim at a time: the reconciler re-enqueues every pending claim, and a
    re-check (a test command) can outlast its period; a second copy run alongside in the same
    workspace could see the first one's work and refute what it verifies. The copy that holds
    the lease also judges evidence that arrived meanwhile; the lease expires with the task's
    time limit, so a worker that died leaves the claim to the reconciler.
    """
    lease = f"verify-claim:{claim_id}"
    if not cache.add(lease, "held", timeout=settings.CELERY_TASK_TIME_LIMIT):
        return  # another worker is re-checking it now
    try:
        judged: set[int] = set()
        while True:
            claim = Claim.objects.filter(pk=claim_id, verification_pending=True)
            found = claim.select_related("run").first()
            if found is None:
                return  # gone, or already judged by an earlier run of this task
            rows = [row for row in unjudged(claim_id) if row.pk not in judged]
            if judged and not rows:
                return
            sources = sources_for(found.run.fleet_id) if rows else Sources()
            verdicts = {
                row.pk: verify_in_time(as_evidence(row), sources, with_limits or limits())
                for row in rows
            }
            record(claim_id, verdicts)
            judged.update(verdicts)
    finally:
        cache.delete(lease)


def verify_in_time(evidence: dict[str, Any], sources: Sources, limits: Limits) -> Verdict:
    """A re-check that outlasts the worker's soft time limit (a host sending its answer byte by
    byte, a huge result) leaves the claim unverified saying so, not waiting with no reason."""
    try:
        return verify(evidence, sources, limits=limits)
    except SoftTimeLimitExceeded:
        return Verdict(
            "unverified",
            f"the re-check took longer than the worker's limit of "
            f"{settings.CELERY_TASK_SOFT_TIME_LIMIT} s, so it was stopped",
        )


@dataclass(frozen=True)
class Change:
    """What judging one piece of evidence does to the claim."""

    status: str | None = None  # the claim's new status, None to keep it
    reason: str = ""  # the claim's new status_reason, "" to keep it
    at: datetime | None = None  # when it was checked (first verdict only)
    by: str = ""


@transaction.atomic
def record(claim_id: int, verdicts: dict[int, Verdict]) -> Claim | None:
    """Write the verdicts of `verdicts` (evidence id -> verdict) in one transaction."""
    # Only the claim is locked: events do not lock the run row, and neither does this.
    claim = (
        Claim.objects.select_for_update(of=("self",))
        .select_related("run")
        .filter(pk=claim_id)
        .first()
    )
    if claim is None:
        return None
    run = claim.run
    was = claim.status
    now = timezone.now()
    reality: list[dict[str, Any]] = []
    for row in unjudged(claim_id).filter(pk__in=list(verdicts)):
        verdict = verdicts[row.pk]
        if row.role == Evidence.Role.POSTED:
            change = judge_posted(claim, row, verdict, now)
        else:
            change = judge_check(claim, row, verdict)
        if change.status == Claim.Status.REFUTED:
            reality.append(reality_row(claim, row, verdict, change.at or now))
        apply_change(claim, change)
    claim.verification_pending = unjudged(claim_id).exists()
    claim.save(
        update_fields=[
            "status",
            "status_reason",
            "checked_at",
            "checked_by",
            "verification_pending",
        ]
    )
    if claim.status == Claim.Status.REFUTED and was != Claim.Status.REFUTED:
        retries.claim_refuted(claim=claim, reality=reality)
    if claim.status != was:
        scheduler.mark_changed(run, consumers_of(run, claim.key))
    return claim


def apply_change(claim: Claim, change: Change) -> None:
    if change.status is not None and change.status != claim.status:
        claim.status = change.status
        if claim.checked_at is None:
            claim.checked_at = change.at
        claim.checked_by = change.by
    if change.reason:
        claim.status_reason = clip(change.reason)


def not_before_posted(claim: Claim, at: datetime) -> datetime:
    # Agents stamp their own events; a check never counts as earlier than the post it checks.
    return max(at, claim.posted_at)


def judge_posted(claim: Claim, row: Evidence, verdict: Verdict, now: datetime) -> Change:
    row.verdict = verdict.status
    row.verdict_reason = clip(verdict.reason)
    row.save(update_fields=["verdict", "verdict_reason"])
    if claim.status != Claim.Status.UNVERIFIED:
        return Change()  # its evidence only decides a claim nobody has checked yet
    if verdict.status == "unverified":
        return Change(reason=f"no verifier could check its evidence: {verdict.reason}")
    return Change(
        status=verdict.status,
        reason=f"{verdict.status} by the verifier: {verdict.reason}",
        at=not_before_posted(claim, now),
        by=VERIFIER,
    )


def judge_check(claim: Claim, row: Evidence, verdict: Verdict) -> Change:
    """A consumer's verdict (kept in `row.verdict`), judged on what the verifier found."""
    accepted, why = accepts(claim, row, verdict)
    claimed = row.verdict
    checker = row.submitted_by
    row.verdict_reason = clip(("accepted: " if accepted else "not accepted: ") + why)
    row.save(update_fields=["verdict_reason"])
    if not accepted:
        if claim.status == Claim.Status.UNVERIFIED:
            return Change(
                reason=f"still unverified: {checker}'s {claimed} verdict was not accepted: {why}"
            )
        return Change()
    if claimed == claim.status:
        return Change()
    return Change(
        status=claimed,
        reason=f"{claimed} by {checker}'s check, confirmed by the verifier: {why}",
        at=not_before_posted(claim, row.created_at),
        by=checker,
    )


def accepts(claim: Claim, row: Evidence, verdict: Verdict) -> tuple[bool, str]:
    """Whether a consumer's verdict stands: its evidence is real, and the verdict follows from it.

    The verifier can tell that the evidence is real (reality matches the checker's hash), not what
    it means for the claim's statement; so the verdict must also agree with the claim's own
    evidence from the same source, when it has some, and may not overturn a reviewer or a
    refutation.
    """
    claimed = row.verdict
    if verdict.status == "unverified":
        return False, f"the verifier could not re-check its evidence: {verdict.reason}"
    if verdict.status == "refuted":
        return False, f"its evidence does not match reality: {verdict.reason}"
    if claim.checked_by.startswith("reviewer:"):
        return False, f"{claim.checked_by} already {claim.status} the claim by hand"
    own = same_source(claim, row)
    if claimed == Claim.Status.REFUTED:
        if own is not None and own.payload_hash == row.payload_hash:
            return False, (
                "its evidence is the claim's own evidence, and reality matches both: a "
                "refutation does not follow"
            )
        return True, verdict.reason
    if claim.status == Claim.Status.REFUTED:
        return False, (
            f"the claim was refuted ({claim.checked_by or 'earlier'}); a consumer's check does not "
            "overturn a refutation, a reviewer may"
        )
    if own is not None and own.payload_hash != row.payload_hash:
        return False, (
            "reality matches this evidence but not the claim's own evidence from the same "
            "source: verified does not follow"
        )
    return True, verdict.reason


def same_source(claim: Claim, row: Evidence) -> Evidence | None:
    """The claim's own evidence that re-runs the same query, file read, command or request."""
    return (
        Evidence.objects.filter(
            claim=claim,
            role=Evidence.Role.POSTED,
            kind=row.kind,
            source=row.source,
            datasource=row.datasource,
            workspace=row.workspace,
        )
        .order_by("id")
        .first()
    )


def reality_row(claim: Claim, row: Evidence, verdict: Verdict, at: datetime) -> dict[str, Any]:
    """Keep what reality gave as a `reality` row; returned as the ground truth of a reframe."""
    real = Evidence.objects.create(
        claim=claim,
        role=Evidence.Role.REALITY,
        kind=row.kind,
        source=row.source,
        # A failing query or a missing file has no payload: the reason is the ground truth.
        payload_hash=payload_hash_of(verdict),
        payload=verdict.payload,
        datasource=row.datasource,
        workspace=row.workspace,
        submitted_by=VERIFIER,
        verdict=Claim.Status.REFUTED,
        verdict_reason=clip(verdict.reason),
        created_at=at,
    )
    return {
        "claim": claim.key,
        "statement": claim.statement,
        "kind": real.kind,
        "source": real.source,
        "datasource": real.datasource or None,
        "workspace": real.workspace or None,
        "payload_hash": real.payload_hash or None,
        "payload": real.payload,
        "reason": verdict.reason,
        "checked_by": row.submitted_by if row.role == Evidence.Role.CHECK else VERIFIER,
    }


def payload_hash_of(verdict: Verdict) -> str:
    return payload_hash(verdict.payload) if verdict.payload is not None else ""
