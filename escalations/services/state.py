"""The state of an escalation: opened (with its hold on the task), claimed, released, closed.

Every change of `Escalation.status` goes through this module; the reviewers' actions
(answer, reroute, return, abort) lock through it and close through it.
"""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from escalations.models import Escalation, FailurePacket
from fleet.errors import Refusal
from fleet.together import Update
from runs import holds
from runs.models import Run, Task

CLAIM_MINUTES = 15
PACKET_FIELDS = ("tried", "ruled_out", "evidence", "smallest_unblocking_question", "options")
ANSWER_MAX_CHARS = 5_000
NOTE_MAX_CHARS = 1_000


class AlreadyActed(Refusal):
    """Someone acted first: the message names who and when ("Answered by alice at ...")."""

    def __init__(self, escalation: Escalation) -> None:
        super().__init__(acted_message(escalation), status=409)
        self.escalation = escalation


def stamp(at: datetime) -> str:
    return timezone.localtime(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def acted_message(escalation: Escalation) -> str:
    who = escalation.claimed_by.get_username() if escalation.claimed_by else "someone"
    when = stamp(escalation.acted_at) if escalation.acted_at else "an earlier time"
    verb = {
        Escalation.Status.ANSWERED: "Answered",
        Escalation.Status.RETURNED: "Returned to the agent",
        Escalation.Status.CLOSED: "Closed",
    }.get(Escalation.Status(escalation.status), "Handled")
    return f"{verb} by {who} at {when}"


def claim_active(escalation: Escalation, now: datetime) -> bool:
    return (
        escalation.status == Escalation.Status.CLAIMED
        and escalation.claim_expires_at is not None
        and escalation.claim_expires_at > now
    )


def refuse_unless_open(escalation: Escalation, reviewer: Any, now: datetime) -> None:
    if escalation.status not in Escalation.OPEN_STATES:
        raise AlreadyActed(escalation)
    if claim_active(escalation, now) and escalation.claimed_by_id != reviewer.pk:
        assert escalation.claimed_by is not None and escalation.claim_expires_at is not None
        raise Refusal(
            f"Claimed by {escalation.claimed_by.get_username()} until "
            f"{stamp(escalation.claim_expires_at)}: ask them, or wait for the claim to expire.",
            status=409,
        )


def lock_escalation(escalation_id: int) -> Escalation:
    """Only the escalation row: claiming changes nothing in the run."""
    return (
        Escalation.objects.select_for_update(of=("self",))
        .select_related("claimed_by", "fleet", "packet")
        .get(pk=escalation_id)
    )


def lock_for_action(escalation_id: int) -> tuple[Run, Task, Escalation]:
    """The run, then the task, then the escalation: the order the work's services lock in. The
    run FOR NO KEY UPDATE, as an update locks it: an event that holds the task and writes a row
    naming the run (a packet's escalation) is not made to wait for it (a deadlock)."""
    run_id, task_id = Escalation.objects.values_list("run_id", "task_id").get(pk=escalation_id)
    run = (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .select_related("fleet")
        .get(pk=run_id)
    )
    task = Task.objects.select_for_update(of=("self",)).select_related("agent").get(pk=task_id)
    escalation = (
        Escalation.objects.select_for_update(of=("self",))
        .select_related("claimed_by", "packet")
        .get(pk=escalation_id)
    )
    return run, task, escalation


def close(escalation: Escalation, reviewer: Any, status: str, now: datetime) -> None:
    """The escalation is done: the one who acted holds it for good (who and when are shown).

    Its hold on the task is lifted by the decision that closes it (answer, reroute, abort), in
    the work; a return lifts it here: the task waits for a better packet, not for a person.
    """
    escalation.status = status
    escalation.claimed_by = reviewer
    escalation.claim_expires_at = None
    escalation.acted_at = now
    escalation.first_looked_at = escalation.first_looked_at or now
    if status == Escalation.Status.CLOSED:
        escalation.closed_at = now
    escalation.save()
    if status == Escalation.Status.RETURNED:
        holds.lift(run=escalation.run_id, codes=[hold_of(escalation)], at=now, clear=False)


def closing(escalation: Escalation, reviewer: Any, status: str, now: datetime) -> Update:
    """`close` (for an answer: no hold lifted here), its write left to the caller, who writes it
    with its others (`fleet.together`)."""
    values = {
        "status": status,
        "claimed_by": reviewer,
        "claim_expires_at": None,
        "acted_at": now,
        "first_looked_at": escalation.first_looked_at or now,
    }
    if status == Escalation.Status.CLOSED:
        values["closed_at"] = now
    for name, value in values.items():
        setattr(escalation, name, value)
    return Update(Escalation, {"pk": escalation.pk}, values)


def refuse_unless_running(run: Run, what: str) -> None:
    if run.state != Run.State.RUNNING:
        raise Refusal(
            f"The run has {run.state}" + (f" ({run.cause})" if run.cause else "") + f": {what}",
            status=409,
        )


def question_of(escalation: Escalation) -> str:
    return escalation.packet.smallest_unblocking_question if escalation.packet else ""


def options_of(escalation: Escalation) -> list[str]:
    content = escalation.packet.content if escalation.packet else {}
    options = content.get("options") if isinstance(content, dict) else None
    return [str(o) for o in options] if isinstance(options, list) else []


@transaction.atomic
def escalation_claim(*, escalation: Escalation, reviewer: Any) -> Escalation:
    """Take the escalation for `CLAIM_MINUTES`; claiming it again extends the claim."""
    now = timezone.now()
    escalation = lock_escalation(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    escalation.status = Escalation.Status.CLAIMED
    escalation.claimed_by = reviewer
    escalation.claim_expires_at = now + timedelta(minutes=CLAIM_MINUTES)
    escalation.first_looked_at = escalation.first_looked_at or now
    escalation.save(update_fields=["status", "claimed_by", "claim_expires_at", "first_looked_at"])
    return escalation


@transaction.atomic
def escalation_release(*, escalation: Escalation, reviewer: Any) -> Escalation:
    """Give a claim back; only its holder can, unless it has expired."""
    now = timezone.now()
    escalation = lock_escalation(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if escalation.status == Escalation.Status.CLAIMED:
        escalation.save(update_fields=unclaimed(escalation))
    return escalation


def unclaimed(escalation: Escalation) -> list[str]:
    """The claim given back: open again, held by nobody. Returns the fields to save."""
    escalation.status = Escalation.Status.OPEN
    escalation.claimed_by = None
    escalation.claim_expires_at = None
    return ["status", "claimed_by", "claim_expires_at"]


def escalation_looked_at(*, escalation: Escalation, packet: bool) -> None:
    """The first look (from the queue or the packet) and the first opening of the packet page."""
    now = timezone.now()
    Escalation.objects.filter(pk=escalation.pk, first_looked_at__isnull=True).update(
        first_looked_at=now
    )
    if packet:
        Escalation.objects.filter(pk=escalation.pk, packet_opened_at__isnull=True).update(
            packet_opened_at=now
        )


def outcome_of(escalation: Escalation) -> tuple[str, list[str]]:
    """How a handled escalation ended, as the desk says it: a headline and its details.

    A reroute or an abort (and the abort that failed the run, for the run's other escalations)
    wrote its own account, first line the headline, in `returned_reason`: the escalation's note
    on how it ended. Otherwise: who acted, and when.
    """
    note = escalation.returned_reason if escalation.status == Escalation.Status.CLOSED else ""
    if note:
        title, *details = note.split("\n")
        return title, details
    return acted_message(escalation), []


def hold_of(escalation: Escalation) -> str:
    """The hold an open escalation keeps on its task: its dependants see it as a blocker."""
    return f"escalation:{escalation.pk}"


def open_escalation(
    *,
    run: Run,
    task: Task,
    packet: FailurePacket | None,
    reason: str,
    attempt_number: int,
    at: datetime,
    routed: Mapping[str, Any] | None = None,
) -> Escalation:
    """A new escalation and its hold; `routed`: its routing's columns, when decided already."""
    escalation = Escalation.objects.create(
        fleet_id=run.fleet_id,
        run=run,
        task=task,
        packet=packet,
        reason=reason,
        attempt_number=attempt_number,
        opened_at=at,
        **(routed or {}),
    )
    holds.place(task=task, code=hold_of(escalation), at=at, new=True)
    return escalation


def reopen(escalation: Escalation, packet: FailurePacket, at: datetime) -> None:
    """The reviewer asked for a better packet and this is it: the same escalation is open again."""
    escalation.status = Escalation.Status.OPEN
    escalation.claimed_by = None
    escalation.claim_expires_at = None
    escalation.acted_at = None
    escalation.packet_opened_at = None
    escalation.packet = packet
    escalation.save()
    holds.place(task=escalation.task, code=hold_of(escalation), at=at)


def close_all(
    escalations: QuerySet[Escalation], reviewer: Any, note: str, at: datetime, run: Run
) -> list[str]:
    """Close the escalations with the same note; returns how each is named ("escalation 7 (x)")."""
    named = [f"escalation {pk} ({key})" for pk, key in escalations.values_list("pk", "task__key")]
    ids = list(escalations.values_list("pk", flat=True))
    codes = [f"escalation:{pk}" for pk in ids]
    escalations.update(
        status=Escalation.Status.CLOSED,
        outcome=Escalation.Outcome.RUN_FAILED,
        closed_at=at,
        acted_at=at,
        claimed_by=reviewer,
        claim_expires_at=None,
        returned_reason=note,
    )
    holds.lift(run=run, codes=codes, at=at)
    return named
