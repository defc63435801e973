"""Judging a verifier's verdict against the claim, or against the consumer's check it re-ran.

Two kinds of evidence reach the verifier:

- a claim's own (`posted`) evidence: reality matches its hash, the claim is verified; it differs,
  the claim is refuted and the real payload is kept as a `reality` row, the ground truth of the
  producing task's next attempt; no verifier can reach it, the claim stays unverified with the
  reason. It decides only a claim that is still unverified.
- a consumer's check (`claim.checked`): its verdict is accepted only when the verifier confirms
  the evidence (reality matches the checker's hash) and the verdict follows from it (see
  `accepts`). A verdict that is not accepted is recorded on its evidence row and in the claim's
  reason, and changes nothing else.

Either way, evidence settles a claim only when it bears on it (`runs.claims.bearing`: it mentions
the claim's subjects, and reality points the way of the verdict) and is not circular
(`runs.claims.circular`: the producer's own check, a read of the run's own artifacts).

A reviewer's verdict (`checked_by` "reviewer:...") is final: the verifier never overturns it.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from runs.claims.bearing import NO_SUBJECT, bearing, subjects_of
from runs.claims.circular import circular
from runs.claims.hashing import payload_hash
from runs.claims.verifiers import Verdict
from runs.models import Claim, Evidence

VERIFIER: Final = "verifier"
REASON_LENGTH: Final = 500  # Claim.status_reason and Evidence.verdict_reason


def clip(text: str, limit: int = REASON_LENGTH) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Change:
    """What judging one piece of evidence does to the claim."""

    status: str | None = None  # the claim's new status, None to keep it
    reason: str = ""  # the claim's new status_reason, "" to keep it
    at: datetime | None = None  # when it was checked (first verdict only)
    by: str = ""


def not_before_posted(claim: Claim, at: datetime) -> datetime:
    # Agents stamp their own events; a check never counts as earlier than the post it checks.
    return max(at, claim.posted_at)


def before_reality(claim: Claim, row: Evidence) -> str | None:
    """Why `row` cannot settle `claim` whatever reality says (so the verifier need not run it)."""
    claimed = row.verdict if row.role == Evidence.Role.CHECK else Claim.Status.VERIFIED
    why = circular(claim, row, claimed)
    if why is None and not subjects_of(claim.about, claim.statement):
        why = NO_SUBJECT
    return why


def off_the_claim(claim: Claim, row: Evidence, verdict: str, reality: Verdict) -> str | None:
    """Why real evidence does not settle the claim as `verdict`, or None: it bears on it."""
    return bearing(
        subjects=subjects_of(claim.about, claim.statement),
        statement=claim.statement,
        kind=row.kind,
        source=row.source,
        payload=reality.payload,
        verdict=verdict,
    )


def judge_posted(claim: Claim, row: Evidence, verdict: Verdict, now: datetime) -> Change:
    row.verdict = verdict.status
    row.verdict_reason = clip(verdict.reason)
    if claim.status != Claim.Status.UNVERIFIED:
        row.save(update_fields=["verdict", "verdict_reason"])
        return Change()  # its evidence only decides a claim nobody has checked yet
    why = before_reality(claim, row)
    if why is None and verdict.status == "unverified":
        row.save(update_fields=["verdict", "verdict_reason"])
        return Change(reason=f"no verifier could check its evidence: {verdict.reason}")
    if why is None:
        why = off_the_claim(claim, row, verdict.status, verdict)
        if why is not None:
            found = "matches" if verdict.status == "verified" else "differs from"
            why = f"reality {found} its evidence, but {why}"
    if why is not None:
        row.verdict, row.verdict_reason = Claim.Status.UNVERIFIED, clip(why)
        row.save(update_fields=["verdict", "verdict_reason"])
        return Change(reason=why)
    row.save(update_fields=["verdict", "verdict_reason"])
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
        reason=f"{claimed} by {checker}'s check, whose evidence the verifier confirmed: {why}",
        at=not_before_posted(claim, row.created_at),
        by=checker,
    )


def accepts(claim: Claim, row: Evidence, verdict: Verdict) -> tuple[bool, str]:
    """Whether a consumer's verdict stands: its evidence is real, and the verdict follows from it.

    The verifier can tell that the evidence is real (reality matches the checker's hash), not what
    it means for the claim's statement; so the evidence must bear on the claim (its subjects,
    its payload), must not be circular, must agree with the claim's own evidence from the same
    source when it has some, and may not overturn a reviewer or a refutation.
    """
    why = before_reality(claim, row)
    if why is not None:
        return False, why
    accepted, why = follows(claim, row, verdict)
    if accepted:
        off = off_the_claim(claim, row, row.verdict, verdict)
        if off is not None:
            return False, off
    return accepted, why


def follows(claim: Claim, row: Evidence, verdict: Verdict) -> tuple[bool, str]:
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
