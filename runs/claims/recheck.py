"""A person asks the verifier to check an unverified claim's own evidence against reality again."""

from django.db import transaction

from fleet.errors import Refusal
from runs import scheduler
from runs.models import Claim, Evidence


def claim_recheck(*, claim: Claim, by: str) -> Claim:
    """Ask the verifier to check the claim's own evidence against reality again.

    Only an unverified claim can be settled by it (a verdict, once given, is changed by a person);
    evidence that is another agent's text, or none at all, cannot be re-checked.
    """
    with transaction.atomic():
        claim = Claim.objects.select_for_update(of=("self",)).get(pk=claim.pk)
        if claim.status != Claim.Status.UNVERIFIED:
            raise Refusal(
                f"{claim.key} is already {claim.status} ({claim.status_reason}); "
                "a re-check settles only an unverified claim.",
                status=409,
            )
        if claim.verification_pending:
            return claim  # already on its way to the verifier
        rows = Evidence.objects.filter(claim=claim, role=Evidence.Role.POSTED).exclude(
            source__istartswith="agent:"
        )
        if not rows.exists():
            raise Refusal(
                f"Nothing a verifier can re-check: {claim.key} was posted "
                + (
                    "citing another agent's text"
                    if claim.evidence.filter(role=Evidence.Role.POSTED).exists()
                    else "without evidence"
                )
                + ". Ask its agent for a query, file, test run or HTTP exchange.",
                status=422,
            )
        rows.update(verdict="", verdict_reason="")
        claim.verification_pending = True
        claim.status_reason = f"re-check asked by {by}; waiting for a verifier"
        claim.save(update_fields=["verification_pending", "status_reason"])
        scheduler.verify_after_commit(claim)
    return claim
