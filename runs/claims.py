"""Claims checked by hand: a reviewer's verdict is recorded as human_answer evidence."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from runs import scheduler
from runs.evidence import payload_hash
from runs.models import Claim, Evidence


@transaction.atomic
def check_by_hand(*, claim: Claim, reviewer: Any, verdict: str, note: str) -> Claim:
    claim = Claim.objects.select_for_update().select_related("run").get(pk=claim.pk)
    now = timezone.now()
    payload = {"verdict": verdict, "note": note}
    Evidence.objects.create(
        claim=claim,
        role=Evidence.Role.CHECK,
        kind="human_answer",
        source=f"reviewer:{reviewer.get_username()}",
        payload_hash=payload_hash(payload),
        payload=payload,
        submitted_by=f"reviewer:{reviewer.get_username()}",
        verdict=verdict,
        verdict_reason=note,
        created_at=now,
    )
    claim.status = verdict
    claim.status_reason = f"{verdict} by hand by {reviewer.get_username()}: {note}"
    claim.checked_at = claim.checked_at or now
    claim.checked_by = f"reviewer:{reviewer.get_username()}"
    claim.verification_pending = False
    claim.save()
    scheduler.mark_changed(
        claim.run, [t.key for t in claim.run.tasks.all() if claim.key in t.consumes]
    )
    return claim
