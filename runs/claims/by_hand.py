"""Claims checked by hand: a reviewer's verdict is recorded as human_answer evidence."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet.errors import Refusal
from runs import halts, retries
from runs.claims import consumers
from runs.claims.hashing import HUMAN_ANSWER, payload_hash
from runs.models import Claim, Evidence

VERDICTS = (Claim.Status.VERIFIED, Claim.Status.REFUTED)


@transaction.atomic
def check_by_hand(*, claim: Claim, reviewer: Any, verdict: str, note: str, seen: str = "") -> Claim:
    """A reviewer verifies or refutes a claim; the verdict is final (no verifier overturns it).
    `seen`, when given, is the status the reviewer saw: a claim settled since is not overwritten
    from a stale page (a 409 that says who settled it)."""
    if verdict not in VERDICTS:
        raise ValueError(f"a reviewer's verdict is verified or refuted, not {verdict!r}")
    # Only the claim is locked: events do not lock the run row, and neither does this.
    claim = Claim.objects.select_for_update(of=("self",)).select_related("run").get(pk=claim.pk)
    if seen and claim.status != seen:
        raise Refusal(
            f"{claim.key} changed since your page showed it {seen}: it is {claim.status} now "
            f"({claim.status_reason}). Read it again, and record your verdict if you still "
            "disagree.",
            status=409,
        )
    was = claim.status
    now = timezone.now()
    who = f"reviewer:{reviewer.get_username()}"
    payload = {"verdict": verdict, "note": note}
    answer = Evidence.objects.create(
        claim=claim,
        role=Evidence.Role.CHECK,
        kind=HUMAN_ANSWER,
        source=who,
        payload_hash=payload_hash(payload),
        payload=payload,
        submitted_by=who,
        verdict=verdict,
        verdict_reason=note[:500],
        created_at=now,
    )
    claim.status = verdict
    claim.status_reason = f"{verdict} by hand by {reviewer.get_username()}: {note}"[:500]
    claim.checked_at = claim.checked_at or now
    claim.checked_by = who
    # Pending checks stay pending: the verifier still records them, but changes nothing now.
    claim.save(update_fields=["status", "status_reason", "checked_at", "checked_by"])
    if verdict == Claim.Status.REFUTED and was != Claim.Status.REFUTED:
        reality = [
            {
                "claim": claim.key,
                "statement": claim.statement,
                "kind": HUMAN_ANSWER,
                "source": who,
                "payload_hash": answer.payload_hash,
                "payload": payload,
                "reason": note,
                "checked_by": who,
            }
        ]
        halts.halt_running_consumers(claim=claim, reality=reality)
        retries.claim_refuted(claim=claim, reality=reality)
    consumers.claim_changed(claim)
    return claim


def supersede_refuted(*, task: Any, statement: str, evidence: dict[str, Any], at: Any) -> list[str]:
    """A reviewer's answer replaces the task's refuted load-bearing claims that others consume.

    The refuted claim keeps its history (uses, evidence, blast radius) under a `@refuted` key;
    the answer takes its key as a verified claim, so the consumers it held are released.
    Returns the keys that were superseded. Called inside the answering transaction.
    """
    superseded = []
    for claim in Claim.objects.select_for_update(of=("self",)).filter(
        task=task, status=Claim.Status.REFUTED, load_bearing=True
    ):
        key = claim.key
        if not consumers.consumers_of(claim):
            continue
        n = 1
        while Claim.objects.filter(run_id=claim.run_id, key=f"{key}@refuted-{n}").exists():
            n += 1
        claim.key = f"{key}@refuted-{n}"
        claim.superseded = True  # its producer's dependants consume the answer now, not it
        claim.save(update_fields=["key", "superseded"])
        answer = answered(
            run_id=claim.run_id,
            task=task,
            key=key,
            statement=statement,
            reason=f"a reviewer's answer replaces the refuted claim {key}, which is kept as refuted",
            who=evidence["source"],
            payload=evidence.get("payload"),
            at=at,
        ).claim
        consumers.claim_changed(answer)  # it settles the halts on the key, too
        superseded.append(key)
    return superseded


def answered(
    *,
    run_id: int,
    task: Any,
    key: str,
    statement: str,
    reason: str,
    who: str,
    payload: Any,
    at: Any,
) -> Evidence:
    """A reviewer's answer is itself a verified claim, with its `human_answer` evidence."""
    claim = Claim.objects.create(
        run_id=run_id,
        task=task,
        key=key,
        statement=statement,
        load_bearing=True,
        status=Claim.Status.VERIFIED,
        status_reason=reason,
        posted_at=at,
        posted_by=who,
        checked_at=at,
        checked_by=who,
    )
    return Evidence.objects.create(
        claim=claim,
        role=Evidence.Role.CHECK,
        kind=HUMAN_ANSWER,
        source=who,
        payload_hash=payload_hash(payload),
        payload=payload,
        submitted_by=who,
        verdict=Claim.Status.VERIFIED,
        verdict_reason="a reviewer's answer is itself a verified claim",
        created_at=at,
    )
