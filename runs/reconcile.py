"""Work of the runs that a lost broker message would strand: found from the database."""

from datetime import datetime


def reenqueue(*, now: datetime) -> dict[str, int]:
    """Re-enqueue verifications and decisions that are due but were never acted on."""
    from runs.models import Claim
    from runs.tasks import verify_claim

    pending = list(
        Claim.objects.filter(verification_pending=True).values_list("pk", flat=True)[:500]
    )
    for claim_id in pending:
        verify_claim.delay(claim_id)
    return {"verifications": len(pending)}
