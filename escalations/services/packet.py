"""Failure packets in: an agent stops and hands one over, or the retry policy escalates and
Bulkhead drafts one from the attempts, asking the agent only for what is missing."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from escalations import intake_sql
from escalations.models import Answer, Escalation, FailurePacket, JoinedTask
from escalations.packet_draft import DRAFTED_FIELDS, missing_fields
from escalations.packets import Packet, asks_again, question_key, validate_packet
from escalations.selectors.attempts import draft_for
from escalations.services import joining, packet_checks, routing
from escalations.services.state import close, hold_of, lock_escalation, open_escalation, reopen
from fleet import outbox
from fleet.errors import ErrorItem, Refusal, error
from fleet.models import Agent, Delivery
from fleet.outbox import notify
from runs import holds, scheduler, task_state
from runs.models import Attempt, Decision, Run, Task
from runs.ownership import refuse_unless_own, run_and_task

# The task's answers and its packets from before them that a new packet is compared with (a
# task stops a few times at most; a careless agent resends the one it sent last).
LOOKED_BACK = 10
ANSWERED_PACKETS_COMPARED = 50


def checked_packet(packet: object) -> tuple[Packet | None, list[ErrorItem]]:
    """The packet if it is good, else every error, each naming its field."""
    checked = validate_packet(packet, loc="data.packet")
    if isinstance(checked, list):
        return None, [error(e.loc, e.msg) for e in checked]
    return checked, []


def packet_errors(packet: object, task: object) -> list[ErrorItem]:
    return checked_packet(packet)[1]


def packet_submit(
    *,
    actor: Agent,
    at: datetime,
    run: str,
    task: str,
    packet: dict[str, Any],
    sender: Agent | None = None,
) -> dict[str, Any]:
    """A packet is how an agent stops: it opens (or fills) the task's escalation.

    After the retry policy escalated, Bulkhead's draft is there: the agent may send only what
    is missing (the question) and the draft gives the rest; whatever it sends replaces the
    draft's. `task` is the task's key or its description in words (`data.task` names the task).
    """
    sent = checked_packet(packet)[0]  # the packet as sent, if it is good without a draft
    if sent is not None:
        joining.ask_in_turn(
            fleet_id=actor.fleet_id,
            question_key=question_key(sent.smallest_unblocking_question),
            dedup_key=sent.dedup_key,
        )
    try:
        row = run_and_task(
            actor.fleet_id, run, task, related=("run__fleet",), **facts_of(actor.fleet_id, sent)
        )
    except Refusal as exc:
        raise Refusal(exc.errors + packet_errors(packet, task), exc.status) from None
    found = row.run
    refuse_unless_own(task=row, actor=actor, sender=sender)
    if sent is not None and first_stop(row):
        refuse_another_tasks_key(sent, row)
        refuse_unless_waitable(row)
        if getattr(row, "any_returned", True):
            refuse_a_returned_packet(sent, row)
        if getattr(row, "any_answered", True):
            refuse_an_answered_packet(sent, row)
        lean = lean_open(found, row, packet, sent, actor=actor, at=at)
        if lean is not None:
            return lean
        # The waiting escalation it asks the same as was answered meanwhile: look again below.
    joined = joining.waiting_join(row)
    if joined is not None:
        return packet_of_joined(found, row, joined, packet, actor=actor, at=at)
    escalation, action = escalation_for_packet(row)
    draft = escalation.packet if escalation is not None else None
    # Bulkhead's draft completes what the agent leaves out; so does a packet completed from one,
    # so the same partial packet sent again (a retry under a new id) changes nothing.
    base = draft if draft is not None and (draft.drafted or draft.from_draft) else None
    content, from_draft = completed(packet, base)
    checked, errors = checked_packet(content)
    if checked is None:
        raise Refusal(errors)
    refuse_another_tasks_key(checked, row)
    refuse_unless_waitable(row)
    if (
        escalation is not None
        and escalation.packet is not None
        and escalation.packet.content == content
        and action == "replaced"
    ):
        # The agent sent the same packet again (a retry): nothing changes.
        return {
            "run": found.key,
            "task": row.key,
            "escalation": escalation.pk,
            "packet": "unchanged",
        }
    if getattr(row, "any_returned", True):
        refuse_a_returned_packet(checked, row)
    # Also when it would open one: an answer that committed while this packet waited for the
    # task's escalations is not in the facts read before.
    if getattr(row, "any_answered", True) or action in ("opened", "reopened"):
        refuse_an_answered_packet(checked, row)
    stored = store_packet(row, actor, content, checked, at=at, from_draft=from_draft)
    previous = escalation.packet if escalation is not None else None
    alone = escalation is None or not joining.waiting_joined(escalation)
    if action != "opened" and escalation is not None and not alone:
        if not joining.asks_the_same(stored, previous):
            # The question changed under the tasks that joined on it: they keep theirs.
            joining.hand_over(escalation, why=f"{row.key} changed its question", at=at)
    elif alone:
        shared = joining.matching_escalation(
            task=row, packet=stored, exclude=escalation.pk if escalation is not None else None
        )
        if shared is not None:
            return join_shared(found, row, stored, shared, own=escalation, action=action, at=at)
    if escalation is None:
        escalation = open_escalation(
            run=found,
            task=row,
            packet=stored,
            reason="the agent stopped and handed over a failure packet",
            attempt_number=getattr(row, "attempts_made", None) or 0,
            at=at,
        )
        routing.route_new(escalation, at=at)
    elif action == "reopened":
        # Its earlier packets and the return's note stay in the task's history.
        reopen(escalation, stored, at)
    else:
        escalation.packet = stored  # the packet it had (if any) stays in the task's history
        escalation.save(update_fields=["packet"])
        routing.packet_changed(escalation, question_in=action == "filled", at=at)
    task_state.escalated(row)
    if action in ("opened", "reopened"):
        notify_opened(escalation, checked, reopened=action == "reopened")
    scheduler.mark_changed(found, [row.key])
    return {"run": found.key, "task": row.key, "escalation": escalation.pk, "packet": action}


def facts_of(fleet_id: int, sent: Packet | None) -> dict[str, Any]:
    """What a packet needs to know of its task besides the task, its run and agent, read with
    them in one query: whether the task has waited on a person before, and (for a packet good
    as sent) the oldest waiting escalation of the fleet that asks the same question."""
    key = question_key(sent.smallest_unblocking_question) if sent is not None else ""
    return intake_sql.packet_facts(
        fleet_id=fleet_id,
        question_key=key,
        dedup_key=sent.dedup_key if sent is not None else "",
        asks=sent is not None,
    )


def first_stop(row: Task) -> bool:
    """The task waits on no escalation (its own or another's), and none was returned to it:
    a packet opens its escalation, or joins one that asks the same.

    A task escalated already is not, whatever its facts say: a packet for the same task that
    committed while this one waited for the task's lock escalated it, and the facts were read
    before that commit (the locked row itself is read again, the rest of the statement not)."""
    return (
        row.state != Task.State.ESCALATED
        and not getattr(row, "waits_joined", True)
        and not getattr(row, "escalation_waits", True)
        and getattr(row, "latest_escalation", "") != Escalation.Status.RETURNED
    )


def lean_open(
    found: Run, row: Task, content: dict[str, Any], checked: Packet, *, actor: Agent, at: datetime
) -> dict[str, Any] | None:
    """A task's first stop: the packet joins the oldest waiting escalation that asks the same
    (None if that one was answered meanwhile), or opens its escalation, routed as it is
    written. On PostgreSQL the writes go together (`escalations.intake_sql`)."""
    new = packet_row(row, actor, content, checked, at=at, from_draft=[])
    shared_id = getattr(row, "shared_escalation", None)
    if shared_id is not None:
        shared = (
            Escalation.objects.select_for_update(of=("self",))
            .select_related("packet", "run", "task")
            .filter(pk=shared_id)
            .first()
        )
        if (
            shared is None
            or shared.status not in Escalation.OPEN_STATES
            or shared.fleet_id != found.fleet_id
            or not joining.asks_the_same(new, shared.packet)
        ):
            return None
        if connection.vendor == "postgresql":
            packet_id, _ = intake_sql.join_escalation(
                packet=new_packet(new),
                change=change_of(found, row),
                escalation_id=shared.pk,
                code=hold_of(shared),
            )
            written(new, packet_id)
            task_state.escalated(row, saved=True)
            changed(found, row)
        else:
            new.save(force_insert=True)
            packet_checks.check_after_commit(new)
            joining.join(escalation=shared, task=row, packet=new, at=at)
        return {
            "run": found.key,
            "task": row.key,
            "escalation": shared.pk,
            "packet": "joined",
            "joined": {"run": shared.run.key, "task": shared.task.key},
        }
    decided = routing.routed(
        fleet_id=found.fleet_id,
        facts=routing.about(row, failure_kind=getattr(row, "failure_kind", None) or ""),
        content=content,
        at=at,
    )
    reason = "the agent stopped and handed over a failure packet"
    attempt_number = getattr(row, "attempts_made", None) or 0
    fields = {
        f"{name}_id" if name in routing.ROUTED_KEYS else name: value
        for name, value in decided.fields().items()
    }
    if connection.vendor == "postgresql":
        delivery = notification(found.fleet, None, checked, reopened=False, run=found, task=row)
        opened = intake_sql.open_escalation(
            packet=new_packet(new),
            change=change_of(found, row),
            fleet_id=found.fleet_id,
            run_id=found.pk,
            reason=reason,
            attempt_number=attempt_number,
            opened_at=at,
            routed={**decided.fields(), "note": decided.note},
            delivery=delivery,
        )
        written(new, opened.packet_id)
        escalation = Escalation(
            pk=opened.escalation_id,
            fleet_id=found.fleet_id,
            run=found,
            task=row,
            packet=new,
            reason=reason,
            attempt_number=attempt_number,
            opened_at=at,
            **fields,
        )
        escalation._state.adding = False
        escalation._state.db = new._state.db
        task_state.escalated(row, saved=True)
        if opened.delivery_id is not None:
            outbox.sent(opened.delivery_id)
        changed(found, row)
    else:
        new.save(force_insert=True)
        packet_checks.check_after_commit(new)
        escalation = open_escalation(
            run=found,
            task=row,
            packet=new,
            reason=reason,
            attempt_number=attempt_number,
            at=at,
            routed=fields,
        )
        if decided.note is not None:
            routing.assigned(escalation, decided, at=at)
        task_state.escalated(row)
        notify_opened(escalation, checked, reopened=False)
        scheduler.mark_changed(found, [row.key])
    routing.announce(escalation, decided, at=at)
    return {"run": found.key, "task": row.key, "escalation": escalation.pk, "packet": "opened"}


def new_packet(packet: FailurePacket) -> intake_sql.NewPacket:
    return intake_sql.NewPacket(
        task_id=packet.task_id,
        agent_id=packet.agent_id,
        content=packet.content,
        question=packet.smallest_unblocking_question,
        question_key=packet.question_key,
        dedup_key=packet.dedup_key,
        submitted_at=packet.submitted_at,
        from_draft=packet.from_draft,
        checks_pending=packet.checks_pending,
    )


def written(packet: FailurePacket, packet_id: int) -> None:
    """The packet as the ORM would have it once written, its re-check asked after commit."""
    packet.pk = packet_id
    packet._state.adding = False
    packet._state.db = "default"
    packet_checks.check_after_commit(packet)


def change_of(found: Run, row: Task) -> intake_sql.Change | None:
    """The run's frontier change, written with the packet's rows (unless a batch gathers it)."""
    if scheduler.batching():
        return None
    return intake_sql.Change(run_id=found.pk, keys=[row.key], created_at=timezone.now())


def changed(found: Run, row: Task) -> None:
    """After `change_of`'s row: the recompute after commit (or the batch's mark)."""
    if scheduler.batching():
        scheduler.mark_changed(found, [row.key])
    else:
        scheduler.recompute_after_commit(found.pk)


def refuse_unless_waitable(row: Task) -> None:
    if row.state in (Task.State.SUCCEEDED, Task.State.CANCELLED):
        raise Refusal(
            [error("data.task", f"task {row.key!r} is {row.state}; nothing to escalate")], 409
        )


def packet_row(
    row: Task,
    actor: Agent,
    content: object,
    checked: Packet,
    *,
    at: datetime,
    from_draft: list[str],
) -> FailurePacket:
    """The packet's row, not written yet."""
    return FailurePacket(
        task=row,
        agent=actor,
        content=content,
        smallest_unblocking_question=checked.smallest_unblocking_question,
        question_key=question_key(checked.smallest_unblocking_question),
        dedup_key=checked.dedup_key,
        submitted_at=at,
        from_draft=from_draft,
        checks_pending=bool(checked.evidence),
    )


def store_packet(
    row: Task,
    actor: Agent,
    content: object,
    checked: Packet,
    *,
    at: datetime,
    from_draft: list[str],
) -> FailurePacket:
    stored = packet_row(row, actor, content, checked, at=at, from_draft=from_draft)
    stored.save(force_insert=True)
    packet_checks.check_after_commit(stored)
    return stored


def join_shared(
    found: Run,
    row: Task,
    stored: FailurePacket,
    shared: Escalation,
    *,
    own: Escalation | None,
    action: str,
    at: datetime,
) -> dict[str, Any]:
    """The packet asks what `shared` asks: the task waits on it. Its own escalation, if it had
    one waiting (Bulkhead's draft, or its earlier packet), closes saying where it went."""
    if own is not None and own.status in Escalation.OPEN_STATES:
        own.returned_reason = (
            f"Joined escalation {shared.pk}: {row.key} asks the same question as "
            f"{shared.task.key}\n{stored.smallest_unblocking_question}"
        )
        own.outcome = Escalation.Outcome.JOINED
        own.packet = stored
        own.save(update_fields=["returned_reason", "outcome", "packet"])
        close(own, None, Escalation.Status.CLOSED, at)
        holds.lift(run=found, codes=[hold_of(own)], at=at, task=row)
    joining.join(escalation=shared, task=row, packet=stored, at=at)
    return {
        "run": found.key,
        "task": row.key,
        "escalation": shared.pk,
        "packet": "joined",
        "joined": {"run": shared.run.key, "task": shared.task.key},
    }


def packet_of_joined(
    found: Run, row: Task, joined: JoinedTask, packet: Any, *, actor: Agent, at: datetime
) -> dict[str, Any]:
    """A packet from a task that waits on another task's escalation: the same packet again
    changes nothing; a new one with the same question replaces its own; another question takes
    it off that escalation, to one that asks it or one of its own."""
    checked, errors = checked_packet(packet)
    if checked is None:
        raise Refusal(errors)
    refuse_another_tasks_key(checked, row)
    shared = joined.escalation
    if joined.packet is not None and joined.packet.content == packet:
        return {"run": found.key, "task": row.key, "escalation": shared.pk, "packet": "unchanged"}
    stored = store_packet(row, actor, packet, checked, at=at, from_draft=[])
    shared = lock_escalation(shared.pk)
    current = shared.packet
    if shared.status in Escalation.OPEN_STATES and joining.asks_the_same(stored, current):
        joined.packet = stored
        joined.save(update_fields=["packet"])
        return {"run": found.key, "task": row.key, "escalation": shared.pk, "packet": "replaced"}
    joining.leave(
        joined,
        left=JoinedTask.Left.MOVED,
        note=f"{row.key} sent another question",
        at=at,
    )
    other = joining.matching_escalation(task=row, packet=stored, exclude=shared.pk)
    if other is not None:
        return join_shared(found, row, stored, other, own=None, action="opened", at=at)
    escalation = open_escalation(
        run=found,
        task=row,
        packet=stored,
        reason="the agent stopped and handed over a failure packet",
        attempt_number=Attempt.objects.filter(task=row).count(),
        at=at,
    )
    routing.route_new(escalation, at=at)
    task_state.escalated(row)
    notify_opened(escalation, checked, reopened=False)
    scheduler.mark_changed(found, [row.key])
    return {"run": found.key, "task": row.key, "escalation": escalation.pk, "packet": "opened"}


def completed(packet: object, draft: FailurePacket | None) -> tuple[object, list[str]]:
    """The agent's packet with what it left out taken from Bulkhead's draft, and which fields."""
    if draft is None or not isinstance(packet, Mapping) or not isinstance(draft.content, dict):
        return packet, []
    taken = [name for name in ("task", *DRAFTED_FIELDS) if name not in packet]
    if not taken:
        return packet, []
    return {**{name: draft.content.get(name) for name in taken}, **packet}, taken


def refuse_another_tasks_key(packet: Packet, task: Task) -> None:
    """`task` in words is fine; another task's key is a packet sent to the wrong task."""
    if packet.task == task.key:
        return
    if Task.objects.filter(run_id=task.run_id, key=packet.task).exists():
        raise Refusal(
            [
                error(
                    "data.packet.task",
                    f"names task {packet.task!r}, not {task.key!r}: send the packet for the task "
                    "it is about (its key or its description in words)",
                )
            ]
        )


def comparable(content: object) -> object:
    """A packet as a reviewer reads it: trimmed, and whatever `task` says in words."""
    checked = validate_packet(content)
    if isinstance(checked, list):
        return content
    shown = checked.as_json()
    del shown["task"]
    return shown


def refuse_a_returned_packet(packet: Packet, task: Task) -> None:
    """A packet a reviewer returned, sent again unchanged, is refused naming the return's note."""
    new = comparable(packet.as_json())
    returned = FailurePacket.objects.filter(task=task, returned_at__isnull=False)
    for old in returned.order_by("-returned_at", "-id"):
        if comparable(old.content) == new:
            raise Refusal(
                [
                    error(
                        "data.packet",
                        "is the packet a reviewer returned, unchanged; the return's note: "
                        f"{old.returned_note!r}. Change what the note asks for and send it again",
                    )
                ]
            )


def refuse_an_answered_packet(packet: Packet, task: Task) -> None:
    """A packet that asks again what a reviewer answered for the task (its own escalation or
    one it joined), with nothing new in `tried`, is refused with the answer: the task's next
    attempt has the answer as ground truth, and a packet after it says what that attempt tried.

    Each answer is to the packets the task sent since the answer before it."""
    joined = JoinedTask.objects.filter(task=task, left=JoinedTask.Left.ANSWERED)
    answers = sorted(
        [
            *Answer.objects.filter(escalation__task=task).order_by("-answered_at")[:LOOKED_BACK],
            *Answer.objects.filter(escalation__in=joined.values("escalation_id")).order_by(
                "-answered_at"
            )[:LOOKED_BACK],
        ],
        key=lambda a: (a.answered_at, a.pk),
    )
    if not answers:
        return
    sent = list(
        FailurePacket.objects.filter(task=task, submitted_at__lte=answers[-1].answered_at)
        .order_by("-submitted_at", "-id")
        .values_list("content", "submitted_at")[:ANSWERED_PACKETS_COMPARED]
    )
    since = None
    for answer in answers:
        asked = [
            content
            for content, at in sent
            if at <= answer.answered_at and (since is None or at > since)
        ]
        since = answer.answered_at
        if asks_again(packet.smallest_unblocking_question, packet.dedup_key, packet.tried, asked):
            raise Refusal(
                [
                    error(
                        "data.packet",
                        f"asks what escalation {answer.escalation_id} answered, and its tried "
                        f"says nothing the answered packet did not; the answer: {answer.text!r}. "
                        "Start the task's next attempt with it as ground truth; if that attempt "
                        "stops too, send what it tried",
                    )
                ]
            )


def notify_opened(escalation: Escalation, packet: Packet, *, reopened: bool) -> None:
    data = opened_data(escalation.pk, escalation.run, escalation.task, packet, reopened=reopened)
    notify(escalation.run.fleet, "escalation.opened", data)


def opened_data(
    escalation_id: int | None, run: Run, task: Task, packet: Packet, *, reopened: bool
) -> dict[str, Any]:
    return {
        "escalation": escalation_id,
        "run": run.key,
        "task": task.key,
        "question": packet.smallest_unblocking_question,
        "reopened": reopened,
        "drafted": False,
    }


def notification(
    fleet: Any, escalation_id: int | None, packet: Packet, *, reopened: bool, run: Run, task: Task
) -> Delivery | None:
    """`notify_opened`'s delivery, not written yet (its escalation's id goes in as it is)."""
    data = opened_data(escalation_id, run, task, packet, reopened=reopened)
    return outbox.prepared(fleet, "escalation.opened", data)


def escalation_for_packet(task: Task) -> tuple[Escalation | None, str]:
    """The escalation a packet for `task` goes to, and what the packet does to it.

    A task has at most one waiting escalation: a packet fills (after the retry policy escalated)
    or replaces the packet of the open or claimed one, reopens the one a reviewer returned for a
    better packet, and opens a new one only when the task has neither.
    """
    # A task's escalations, in one read: a task stops a few times at most.
    every = list(
        Escalation.objects.select_for_update(of=("self",))
        .select_related("packet")
        .filter(task=task)
        .order_by("id")
    )
    waiting = next((e for e in every if e.status in Escalation.OPEN_STATES), None)
    if waiting is not None:
        # Bulkhead's draft is filled by the agent's packet, not replaced.
        has_own = waiting.packet is not None and not waiting.packet.drafted
        return waiting, "replaced" if has_own else "filled"
    latest = every[-1] if every else None
    if latest is not None and latest.status == Escalation.Status.RETURNED:
        return latest, "reopened"
    return None, "opened"


def open_for_decision(*, decision: Decision, attempt: Attempt, **_: Any) -> Escalation:
    """The retry policy escalated: open the task's escalation (or find the open one). Unless a
    packet came with this attempt, Bulkhead drafts one from the attempts, shown at once, and
    asks the agent only for what is missing. Runs in the deciding transaction."""
    run, task = decision.run, decision.task
    joined = joining.waiting_join(task)
    if joined is not None:
        return joined.escalation  # its packet already joined another task's question
    packet = (
        FailurePacket.objects.filter(task=task, drafted=False, submitted_at__gte=attempt.started_at)
        .order_by("-submitted_at")
        .first()
    )
    escalation = (
        Escalation.objects.filter(task=task, status__in=Escalation.OPEN_STATES)
        .select_related("packet")
        .order_by("opened_at")
        .first()
    )
    if escalation is None:
        escalation = open_escalation(
            run=run,
            task=task,
            packet=packet or store_draft(task, at=decision.created_at),
            reason=decision.reason,
            attempt_number=attempt.number,
            at=decision.created_at,
        )
        routing.route_new(escalation, at=decision.created_at)
        notify(
            run.fleet,
            "escalation.opened",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "reason": decision.reason,
                "question": packet.smallest_unblocking_question if packet else None,
                "reopened": False,
                "drafted": packet is None,
            },
        )
    elif packet is None and escalation.packet is None:
        escalation.packet = store_draft(task, at=decision.created_at)
        escalation.save(update_fields=["packet"])
    current = escalation.packet
    if packet is None and current is not None and current.drafted:
        notify(
            run.fleet,
            "packet.requested",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "agent": task.agent.name,
                "attempt": attempt.number,
                "reason": decision.reason,
                "missing": list(missing_fields(current.content)),
                "draft": current.content,
            },
        )
    return escalation


def store_draft(task: Task, *, at: datetime) -> FailurePacket:
    """Bulkhead's packet for the task, from what it recorded; its evidence is re-checked."""
    draft = draft_for(task)
    stored = FailurePacket.objects.create(
        task=task,
        agent=task.agent,
        content=draft.content,
        smallest_unblocking_question="",
        submitted_at=at,
        drafted=True,
        checks_pending=bool(draft.content["evidence"]),
    )
    packet_checks.check_after_commit(stored)
    return stored
