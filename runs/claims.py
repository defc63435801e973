"""Claims checked by hand: a reviewer's verdict is recorded as human_answer evidence."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from runs import retries, scheduler
from runs.evidence import HUMAN_ANSWER, payload_hash
from runs.models import Claim, Evidence
from runs.services import consumers_of

VERDICTS = (Claim.Status.VERIFIED, Claim.Status.REFUTED)


@transaction.atomic
def check_by_hand(*, claim: Claim, reviewer: Any, verdict: str, note: str) -> Claim:
    """A reviewer verifies or refutes a claim; the verdict is final (no verifier overturns it)."""
    if verdict not in VERDICTS:
        raise ValueError(f"a reviewer's verdict is verified or refuted, not {verdict!r}")
    # Only the claim is locked: events do not lock the run row, and neither does this.
    claim = Claim.objects.select_for_update(of=("self",)).select_related("run").get(pk=claim.pk)
    run = claim.run
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
        retries.claim_refuted(
            claim=claim,
            reality=[
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
            ],
        )
    scheduler.mark_changed(run, consumers_of(run, claim.key))
    return claim
