"""Verifying a claim's evidence with the fleet's sources, and recording what reality said.

The verifiers run outside any transaction (they touch databases, files, hosts and commands, and
may take seconds); their verdicts are then recorded in one transaction that locks the claim,
judges only evidence nobody has judged yet (`runs.claims.judging`), and asks the scheduler to
recompute the claim's consumers. Running twice is harmless: the second run finds nothing left to
judge.
"""

from collections.abc import Iterable
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from fleet.models import VerificationSource
from runs import halts, retries
from runs.claims import consumers
from runs.claims.circular import artifact_read_through
from runs.claims.hashing import HUMAN_ANSWER
from runs.claims.judging import (
    Change,
    before_reality,
    clip,
    judge_check,
    judge_posted,
    reality_row,
)
from runs.claims.verifiers import DEFAULT_LIMITS, Limits, Sources, Verdict, verify
from runs.models import Claim, Evidence


def limits() -> Limits:
    """The verifiers' limits, with a command timeout that ends before the task's soft time limit."""
    soft = float(getattr(settings, "CELERY_TASK_SOFT_TIME_LIMIT", 100) or 100)
    return Limits(command_timeout=max(1.0, min(DEFAULT_LIMITS.command_timeout, soft * 0.8)))


def sources_for(fleet_id: int) -> Sources:
    """The fleet's registered verification sources as the verifiers' plain values."""
    return sources_of_fleets([fleet_id])[fleet_id]


def sources_of_fleets(fleet_ids: Iterable[int]) -> dict[int, Sources]:
    """`sources_for` of each fleet, in one query."""
    ids = set(fleet_ids)
    found: dict[int, dict[str, dict[str, str]]] = {
        fleet_id: {kind: {} for kind in VerificationSource.Kind.values} for fleet_id in ids
    }
    for fleet_id, kind, name, value in VerificationSource.objects.filter(
        fleet_id__in=ids
    ).values_list("fleet_id", "kind", "name", "value"):
        found[fleet_id][kind][name] = value
    return {
        fleet_id: Sources(
            datasources=kinds[VerificationSource.Kind.DATASOURCE],
            workspaces=kinds[VerificationSource.Kind.WORKSPACE],
            hosts=frozenset(kinds[VerificationSource.Kind.HOST].values()),
            commands=frozenset(kinds[VerificationSource.Kind.COMMAND].values()),
        )
        for fleet_id, kinds in found.items()
    }


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
            found = claim.select_related("run", "task__agent").first()
            if found is None:
                return  # gone, or already judged by an earlier run of this task
            rows = [row for row in unjudged(claim_id) if row.pk not in judged]
            if judged and not rows:
                return
            sources = sources_for(found.run.fleet_id) if rows else Sources()
            verdicts = {row.pk: re_check(found, row, sources, with_limits) for row in rows}
            record(claim_id, verdicts)
            judged.update(verdicts)
    finally:
        cache.delete(lease)


def re_check(claim: Claim, row: Evidence, sources: Sources, with_limits: Limits | None) -> Verdict:
    """The verifier's verdict on `row`; not run for evidence that cannot settle the claim anyway
    (a circular check, a claim with no subject): judging says why."""
    why = before_reality(claim, row)
    if why is None and row.kind == "file_read":
        why = artifact_read_through(claim, row, sources.workspaces)
    if why is not None:
        return Verdict("unverified", why)
    return verify_in_time(as_evidence(row), sources, with_limits or limits())


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


@transaction.atomic
def record(claim_id: int, verdicts: dict[int, Verdict]) -> Claim | None:
    """Write the verdicts of `verdicts` (evidence id -> verdict) in one transaction."""
    # Only the claim is locked: events do not lock the run row, and neither does this.
    claim = (
        Claim.objects.select_for_update(of=("self",))
        .select_related("run", "task__agent")
        .filter(pk=claim_id)
        .first()
    )
    if claim is None:
        return None
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
        halts.halt_running_consumers(claim=claim, reality=reality)
        retries.claim_refuted(claim=claim, reality=reality)
    if claim.status != was:
        consumers.claim_changed(claim)
    return claim


def apply_change(claim: Claim, change: Change) -> None:
    if change.status is not None and change.status != claim.status:
        claim.status = change.status
        if claim.checked_at is None:
            claim.checked_at = change.at
        claim.checked_by = change.by
    if change.reason:
        claim.status_reason = clip(change.reason)
