"""A reviewer on the work itself: re-check a claim, verify or refute it by hand, make it
load-bearing, release a stop."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from escalations.services.state import NOTE_MAX_CHARS, refuse_unless_running
from fleet import access
from fleet.errors import Refusal
from runs import task_state
from runs.claims import consumers, recheck
from runs.claims.by_hand import VERDICTS, check_by_hand
from runs.models import Claim, Run, Task


def refuse_unless_reviewer(user: Any, fleet_id: int, fleet: str) -> None:
    if not access.reviews(user, fleet_id):
        raise Refusal(
            f"Only a reviewer of fleet {fleet} can act on its escalations, claims and tasks: "
            "as its manager you can read them.",
            status=403,
        )


def claim_recheck(*, claim: Claim, reviewer: Any) -> Claim:
    """Ask the verifier to check the claim's own evidence against reality again."""
    return recheck.claim_recheck(claim=claim, by=reviewer.get_username())


def claim_check_by_hand(
    *, claim: Claim, reviewer: Any, verdict: str, note: str, seen: str = ""
) -> Claim:
    """A reviewer verifies or refutes a claim by hand: `human_answer` evidence from
    `reviewer:<user>` with the note, the refutation handed to the retry policy, and the frontier
    recomputed after commit. `seen` is the claim's status on the reviewer's page: if it changed
    since (another reviewer's verdict, the verifier's), the verdict is refused, saying how."""
    note = note.strip()
    run = claim.run
    refuse_unless_reviewer(reviewer, run.fleet_id, run.fleet.name)
    if verdict not in VERDICTS:
        raise Refusal("Choose a verdict: verified or refuted.", status=422)
    if not note:
        raise Refusal(
            f"Say what you checked to find {claim.key} {verdict}: the note is its evidence.",
            status=422,
        )
    if len(note) > NOTE_MAX_CHARS:
        raise Refusal(
            f"The note is {len(note):,} characters; it may have at most {NOTE_MAX_CHARS:,}.",
            status=422,
        )
    refuse_unless_running(run, "a verdict now would change nothing.")
    if claim.status == verdict:
        raise Refusal(f"{claim.key} is already {verdict} ({claim.status_reason}).", status=409)
    return check_by_hand(claim=claim, reviewer=reviewer, verdict=verdict, note=note, seen=seen)


def claim_raise(*, claim: Claim, reviewer: Any) -> Claim:
    """A reviewer makes a claim its producer posted as not load-bearing load-bearing: it gates
    every task that consumes it until it is verified. It is never lowered again."""
    run = claim.run
    refuse_unless_reviewer(reviewer, run.fleet_id, run.fleet.name)
    refuse_unless_running(run, "raising a claim now would gate nothing.")
    return consumers.claim_raise(claim=claim, by=f"reviewer:{reviewer.get_username()}")


@transaction.atomic
def task_release_stop(*, task: Task, reviewer: Any) -> Task:
    """Release a task's uncertain-dependency stop: a reviewer lets its external effect go ahead
    although its dependencies are uncertain."""
    run = (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .select_related("fleet")
        .get(pk=task.run_id)
    )
    refuse_unless_reviewer(reviewer, run.fleet_id, run.fleet.name)
    refuse_unless_running(run, "there is nothing to release.")
    task.run = run
    return task_state.release_stop(task=task, by=reviewer.get_username(), at=timezone.now())
