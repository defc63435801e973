"""Work of the runs that a lost broker message would strand: found from the database."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from runs.models import Claim, Decision
from runs.selectors import undecided_attempts
from runs.tasks import act_on_decision, after_attempt, verify_claim

BATCH = 500


def reenqueue(*, now: datetime) -> dict[str, int]:
    """Re-enqueue verifications, owed decisions and due decisions that were never acted on.

    Each task they enqueue is idempotent, so one that was only slow, not lost, runs once.
    """
    pending = list(
        Claim.objects.filter(verification_pending=True).values_list("pk", flat=True)[:BATCH]
    )
    for claim_id in pending:
        verify_claim.delay(claim_id)

    owed = list(undecided_attempts().order_by("pk").values_list("pk", flat=True)[:BATCH])
    for attempt_id in owed:
        after_attempt.delay(attempt_id)

    # A retry's own message fires at its not_before; one that is due past the grace was lost,
    # or was held back because its wait was longer than the broker can keep a message.
    grace = now - timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    due = list(
        Decision.objects.filter(acted_at__isnull=True)
        .filter(Q(not_before__lte=grace) | Q(not_before__isnull=True, created_at__lte=grace))
        .order_by("not_before")
        .values_list("pk", flat=True)[:BATCH]
    )
    for decision_id in due:
        act_on_decision.delay(decision_id)
    return {"verifications": len(pending), "attempts": len(owed), "decisions": len(due)}
