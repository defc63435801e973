"""Work of the runs that a lost broker message would strand: found from the database."""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from runs import tasks
from runs.models import Claim, Decision, FrontierChange
from runs.selectors import undecided_attempts

BATCH = 500


def reenqueue(*, now: datetime, **_: Any) -> dict[str, int]:
    """Re-enqueue frontiers behind their changes, verifications, owed and due decisions.

    Each task they enqueue is idempotent, so one that was only slow, not lost, runs once.
    Called by the fleet's reconciler (`fleet.signals.reconciling`).
    """
    grace = now - timedelta(seconds=settings.RECONCILE_GRACE_SECONDS)
    stale = FrontierChange.objects.filter(created_at__lte=grace).values_list("run_id", flat=True)
    runs = sorted(set(stale[:5000]))[:BATCH]
    for run_id in runs:
        tasks.recompute.delay(run_id, None, None)

    pending = list(
        Claim.objects.filter(verification_pending=True).values_list("pk", flat=True)[:BATCH]
    )
    for claim_id in pending:
        tasks.verify_claim.delay(claim_id)

    owed = list(undecided_attempts().order_by("pk").values_list("pk", flat=True)[:BATCH])
    for attempt_id in owed:
        tasks.after_attempt.delay(attempt_id)

    # A retry's own message fires at its not_before; one that is due past the grace was lost,
    # or was held back because its wait was longer than the broker can keep a message.
    due = list(
        Decision.objects.filter(acted_at__isnull=True)
        .filter(Q(not_before__lte=grace) | Q(not_before__isnull=True, created_at__lte=grace))
        .order_by("not_before")
        .values_list("pk", flat=True)[:BATCH]
    )
    for decision_id in due:
        tasks.act_on_decision.delay(decision_id)
    return {
        "runs": len(runs),
        "verifications": len(pending),
        "attempts": len(owed),
        "decisions": len(due),
    }
