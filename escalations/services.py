"""Writes of the human desk: packets in, escalations opened, and the reviewers' actions."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from escalations.models import Answer, Escalation, FailurePacket
from escalations.packets import Packet, validate_packet
from fleet.errors import Refusal, error
from fleet.events import PacketSubmitted
from fleet.intake import Context
from fleet.models import Agent, Membership
from fleet.outbox import notify
from runs import frontier, policy, scheduler
from runs.claims.by_hand import VERDICTS, check_by_hand, supersede_refuted
from runs.claims.hashing import HUMAN_ANSWER, payload_hash
from runs.context import next_attempt
from runs.models import Attempt, Blocker, Claim, Decision, Evidence, ProgressLine, Run, Task
from runs.services import refuse_unless_own, run_for, task_for


def checked_packet(packet: object, task: object) -> tuple[Packet | None, list[dict[str, str]]]:
    """The packet if it is good, else every error, each naming its field (and a wrong task)."""
    checked = validate_packet(packet, loc="data.packet")
    if isinstance(checked, list):
        return None, [error(e.loc, e.msg) for e in checked]
    if isinstance(task, str) and checked.task != task:
        return None, [error("data.packet.task", f"names task {checked.task!r}, not {task!r}")]
    return checked, []


def packet_errors(packet: object, task: object) -> list[dict[str, str]]:
    return checked_packet(packet, task)[1]


def packet_submit(context: Context, data: PacketSubmitted) -> dict[str, Any]:
    """A packet is how an agent stops: it opens (or fills) the task's escalation."""
    try:
        run = run_for(context, data.run)
        task = task_for(run, data.task)
    except Refusal as exc:
        raise Refusal(exc.errors + packet_errors(data.packet, data.task), exc.status) from None
    refuse_unless_own(context, task)
    checked, errors = checked_packet(data.packet, task.key)
    if checked is None:
        raise Refusal(errors)
    if task.state in (Task.State.SUCCEEDED, Task.State.CANCELLED):
        raise Refusal(
            [error("data.task", f"task {task.key!r} is {task.state}; nothing to escalate")], 409
        )
    escalation, action = escalation_for_packet(task)
    if (
        escalation is not None
        and escalation.packet is not None
        and escalation.packet.content == data.packet
        and action == "replaced"
    ):
        # The agent sent the same packet again (a retry): nothing changes.
        return {
            "run": run.key,
            "task": task.key,
            "escalation": escalation.pk,
            "packet": "unchanged",
        }
    packet = FailurePacket.objects.create(
        task=task,
        agent=context.actor,
        content=data.packet,
        smallest_unblocking_question=checked.smallest_unblocking_question,
        submitted_at=context.at,
    )
    if escalation is None:
        escalation = Escalation.objects.create(
            fleet_id=run.fleet_id,
            run=run,
            task=task,
            packet=packet,
            reason="the agent stopped and handed over a failure packet",
            attempt_number=Attempt.objects.filter(task=task).count(),
            opened_at=context.at,
        )
    elif action == "reopened":
        # The reviewer asked for a better packet: this is it. The same escalation is open again
        # (its earlier packets and the return's note stay in the task's history).
        escalation.status = Escalation.Status.OPEN
        escalation.claimed_by = None
        escalation.claim_expires_at = None
        escalation.acted_at = None
        escalation.packet_opened_at = None
        escalation.packet = packet
        escalation.save()
    else:
        escalation.packet = packet  # the packet it had (if any) stays in the task's history
        escalation.save(update_fields=["packet"])
    task.state = Task.State.ESCALATED
    task.ready = False
    task.save(update_fields=["state", "ready"])
    if action in ("opened", "reopened"):
        notify(
            context.sender.fleet,
            "escalation.opened",
            {
                "escalation": escalation.pk,
                "run": run.key,
                "task": task.key,
                "question": checked.smallest_unblocking_question,
                "reopened": action == "reopened",
            },
        )
    scheduler.mark_changed(run, [task.key])
    return {"run": run.key, "task": task.key, "escalation": escalation.pk, "packet": action}


def escalation_for_packet(task: Task) -> tuple[Escalation | None, str]:
    """The escalation a packet for `task` goes to, and what the packet does to it.

    A task has at most one waiting escalation: a packet fills (after the retry policy escalated)
    or replaces the packet of the open or claimed one, reopens the one a reviewer returned for a
    better packet, and opens a new one only when the task has neither.
    """
    escalations = Escalation.objects.select_for_update(of=("self",)).select_related("packet")
    waiting = (
        escalations.filter(task=task, status__in=Escalation.OPEN_STATES).order_by("id").first()
    )
    if waiting is not None:
        return waiting, "replaced" if waiting.packet_id else "filled"
    latest = escalations.filter(task=task).order_by("-id").first()
    if latest is not None and latest.status == Escalation.Status.RETURNED:
        return latest, "reopened"
    return None, "opened"


# The reviewer's actions (DESIGN 7): claim, answer, reroute, return, abort; and a re-check.

CLAIM_MINUTES = 15
PACKET_FIELDS = ("tried", "ruled_out", "evidence", "smallest_unblocking_question", "options")
ANSWER_MAX_CHARS = 5_000
NOTE_MAX_CHARS = 1_000


class AlreadyActed(Refusal):
    """Someone acted first: the message names who and when ("Answered by alice at ...")."""

    def __init__(self, escalation: Escalation) -> None:
        super().__init__(acted_message(escalation), status=409)
        self.escalation = escalation


@dataclass(frozen=True)
class Answered:
    answer: Answer
    released: list[str]
    blockers: list[str]  # what the reframed task still waits on, if anything


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
        .select_related("claimed_by", "fleet")
        .get(pk=escalation_id)
    )


def lock_for_action(escalation_id: int) -> tuple[Run, Task, Escalation]:
    """The run, then the task, then the escalation: the order the work's services lock in."""
    run_id, task_id = Escalation.objects.values_list("run_id", "task_id").get(pk=escalation_id)
    run = Run.objects.select_for_update(of=("self",)).select_related("fleet").get(pk=run_id)
    task = Task.objects.select_for_update(of=("self",)).select_related("agent").get(pk=task_id)
    escalation = (
        Escalation.objects.select_for_update(of=("self",))
        .select_related("claimed_by", "packet")
        .get(pk=escalation_id)
    )
    return run, task, escalation


def close(escalation: Escalation, reviewer: Any, status: str, now: datetime) -> None:
    """The escalation is done: the one who acted holds it for good (who and when are shown)."""
    escalation.status = status
    escalation.claimed_by = reviewer
    escalation.claim_expires_at = None
    escalation.acted_at = now
    escalation.first_looked_at = escalation.first_looked_at or now
    if status == Escalation.Status.CLOSED:
        escalation.closed_at = now
    escalation.save()


def clear_escalation_blockers(run: Run, escalation: Escalation, now: datetime) -> None:
    Blocker.objects.filter(
        task__run=run, code=f"escalation:{escalation.pk}", cleared_at__isnull=True
    ).update(cleared_at=now)


def settle_decisions(task: Task, now: datetime) -> None:
    # A person's decision replaces any earlier one still waiting (a retry not yet due).
    Decision.objects.filter(task=task, acted_at__isnull=True).update(acted_at=now)


def latest_attempt(task: Task) -> Attempt | None:
    return task.attempts.order_by("-number").first()


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
        escalation.status = Escalation.Status.OPEN
        escalation.claimed_by = None
        escalation.claim_expires_at = None
        escalation.save(update_fields=["status", "claimed_by", "claim_expires_at"])
    return escalation


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


def nodes_and_world(run: Run) -> tuple[dict[str, frontier.TaskNode], frontier.World]:
    return scheduler.nodes_for(run), scheduler.world_for(run)


@transaction.atomic
def escalation_answer(
    *, escalation: Escalation, reviewer: Any, text: str, option: str | None = None
) -> Answered:
    """Answer the packet's question: a verified claim, a reframed next attempt, the work released.

    One transaction; the frontier recompute and the notifications go out after its commit. One
    answer per escalation: whoever comes second gets `AlreadyActed` naming who answered and when.
    """
    text, option = text.strip(), (option or "").strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if option and option not in options_of(escalation):
        raise Refusal("Choose one of the packet's options, or write the answer.", status=422)
    if not text and not option:
        raise Refusal("Write the answer (or choose an option) before releasing.", status=422)
    if len(text) > ANSWER_MAX_CHARS:
        raise Refusal(
            f"The answer is {len(text):,} characters; keep it under {ANSWER_MAX_CHARS:,}: "
            "the agent needs the one fact, not an essay.",
            status=422,
        )
    refuse_unless_running(run, "an answer cannot release anything; abort to close it.")
    if task.state != Task.State.ESCALATED:
        raise Refusal(
            f"The task {task.key} is {task.state}, not waiting for an answer.", status=409
        )
    # An option with a note is both; the option's own words typed again are just the option.
    answer_text = f"{option}: {text}" if option and text and text != option else (text or option)
    try:
        with transaction.atomic():
            answer = Answer.objects.create(
                escalation=escalation,
                reviewer=reviewer,
                text=answer_text,
                option=option,
                answered_at=now,
            )
    except IntegrityError:
        escalation.refresh_from_db()
        raise AlreadyActed(escalation) from None
    who = f"reviewer:{reviewer.get_username()}"
    question = question_of(escalation) or escalation.reason
    payload = {"question": question, "answer": answer_text, "escalation": escalation.pk}
    claim = Claim.objects.create(
        run=run,
        task=task,
        key=f"answer.escalation-{escalation.pk}",
        statement=f"{question} — {answer_text}",
        load_bearing=True,
        status=Claim.Status.VERIFIED,
        status_reason=f"verified: answered by {reviewer.get_username()}, a reviewer",
        posted_at=now,
        checked_at=now,
        checked_by=who,
    )
    evidence = Evidence.objects.create(
        claim=claim,
        role=Evidence.Role.CHECK,
        kind=HUMAN_ANSWER,
        source=who,
        payload_hash=payload_hash(payload),
        payload=payload,
        submitted_by=who,
        verdict=Claim.Status.VERIFIED,
        verdict_reason="a reviewer's answer is itself a verified claim",
        created_at=now,
    )
    truth = {
        "kind": HUMAN_ANSWER,
        "source": who,
        "question": question,
        "answer": answer_text,
        "claim": claim.key,
        "escalation": escalation.pk,
        "payload_hash": evidence.payload_hash,
    }
    attempt = latest_attempt(task)
    settle_decisions(task, now)
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.REFRAME,
        reason=(
            f"Reframe: {reviewer.get_username()} answered escalation {escalation.pk} "
            f"({question}): {answer_text}. The next attempt gets the answer as ground truth."
        ),
        ground_truth=[truth],
        created_at=now,
        acted_at=now,
    )
    task.state = Task.State.PENDING
    task.ready = False
    task.finished_at = None
    task.save(update_fields=["state", "ready", "finished_at"])
    clear_escalation_blockers(run, escalation, now)
    close(escalation, reviewer, Escalation.Status.ANSWERED, now)
    # The answer is the truth the task's refuted claims lacked: it takes their place.
    supersede_refuted(
        task=task,
        statement=answer_text,
        evidence={"source": who, "payload_hash": evidence.payload_hash, "payload": payload},
        at=now,
    )
    nodes, world = nodes_and_world(run)
    released = released_by(nodes, world, task.key)
    blockers = list(frontier.frontier(nodes, world).deferred.get(task.key, ()))
    answer.released = released
    answer.save(update_fields=["released"])
    context = next_attempt(task)
    notify(
        run.fleet,
        "task.reframed",
        {
            "run": run.key,
            "task": task.key,
            "agent": task.agent.name,
            "attempt": attempt.number if attempt else 0,
            "reason": decision.reason,
            "ground_truth": context["ground_truth"],
            "scope": context["scope"],
            "escalation": escalation.pk,
        },
    )
    notify(
        run.fleet,
        "escalation.answered",
        {
            "escalation": escalation.pk,
            "run": run.key,
            "task": task.key,
            "question": question,
            "answer": answer_text,
            "by": who,
            "released": released,
        },
    )
    scheduler.mark_changed(run, released)
    return Answered(answer=answer, released=released, blockers=blockers)


@transaction.atomic
def escalation_reroute(*, escalation: Escalation, reviewer: Any, agent: str, note: str) -> Decision:
    """Hand the task to another agent of the fleet (or a tool); its next attempt keeps the context."""
    note = note.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    target = Agent.objects.filter(fleet_id=run.fleet_id, name=agent).first()
    if target is None:
        raise Refusal(f"Choose an agent of the fleet {run.fleet.name}.", status=422)
    if target.pk == task.agent_id:
        raise Refusal(f"{task.key} is already {target.name}'s: choose another agent.", status=422)
    if not note:
        raise Refusal("Say why it goes to another agent: the new agent reads it.", status=422)
    refuse_unless_running(run, "there is nothing to reroute; abort to close it.")
    was = task.agent.name
    attempt = latest_attempt(task)
    settle_decisions(task, now)
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.REROUTE,
        reason=(
            f"Reroute: {reviewer.get_username()} handed {task.key} from {was} to {target.name} "
            f"(escalation {escalation.pk}): {note[:NOTE_MAX_CHARS]}"
        ),
        reroute_to=target.name,
        created_at=now,
        acted_at=now,
    )
    task.agent = target
    task.state = Task.State.PENDING
    task.ready = False
    task.finished_at = None
    task.save(update_fields=["agent", "state", "ready", "finished_at"])
    clear_escalation_blockers(run, escalation, now)
    # How it ended, as the desk says it (see outcome_of): the headline, then the reviewer's note.
    escalation.returned_reason = (
        f"Rerouted to {target.name} by {reviewer.get_username()}\n{note[:NOTE_MAX_CHARS]}"
    )
    close(escalation, reviewer, Escalation.Status.CLOSED, now)
    notify(
        run.fleet,
        "task.rerouted",
        {
            "run": run.key,
            "task": task.key,
            "attempt": attempt.number if attempt else 0,
            "from": was,
            "to": target.name,
            "agent": target.name,
            "tool": target.is_tool,
            "reason": decision.reason,
            "escalation": escalation.pk,
        },
    )
    scheduler.mark_changed(run, [task.key])
    return decision


@transaction.atomic
def escalation_return(
    *, escalation: Escalation, reviewer: Any, field: str, note: str
) -> Escalation:
    """Send the packet back naming the field that is not good enough; the agent sends a better one."""
    note = note.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if field not in PACKET_FIELDS:
        raise Refusal("Name the packet field that is not good enough.", status=422)
    if not note:
        raise Refusal(f"Say what is missing from {field}: the agent reads it.", status=422)
    escalation.returned_reason = f"{field}: {note[:NOTE_MAX_CHARS]}"
    close(escalation, reviewer, Escalation.Status.RETURNED, now)
    notify(
        run.fleet,
        "packet.returned",
        {
            "escalation": escalation.pk,
            "run": run.key,
            "task": task.key,
            "agent": task.agent.name,
            "field": field,
            "reason": note[:NOTE_MAX_CHARS],
            "by": f"reviewer:{reviewer.get_username()}",
        },
    )
    return escalation


def downstream(nodes: dict[str, frontier.TaskNode], key: str) -> list[str]:
    """Every task that depends on `key`, directly or not (breadth first)."""
    reverse = frontier.dependants(nodes)
    seen: dict[str, None] = {}
    queue = list(reverse.get(key, ()))
    while queue:
        current = queue.pop(0)
        if current in seen or current == key:
            continue
        seen[current] = None
        queue.extend(reverse.get(current, ()))
    return list(seen)


@transaction.atomic
def escalation_abort(*, escalation: Escalation, reviewer: Any, reason: str) -> Decision:
    """Stop the task for good: it and the work waiting on it are cancelled, and the run fails."""
    reason = reason.strip()
    now = timezone.now()
    run, task, escalation = lock_for_action(escalation.pk)
    refuse_unless_open(escalation, reviewer, now)
    if not reason:
        raise Refusal(
            "Say why the task is aborted: it becomes the run's failure cause.", status=422
        )
    reason = reason[:NOTE_MAX_CHARS]
    who = f"reviewer:{reviewer.get_username()}"
    nodes = scheduler.nodes_for(run)
    waiting = [
        key for key in downstream(nodes, task.key) if nodes[key].state in frontier.UNFINISHED
    ]
    cancel = Task.objects.filter(run=run, key__in=waiting).exclude(state=Task.State.RUNNING)
    cancelled = sorted(cancel.values_list("key", flat=True))
    attempt = latest_attempt(task)
    settle_decisions(task, now)
    dependants = f"; {len(cancelled)} task{'s' if len(cancelled) != 1 else ''} waiting on it "
    dependants += f"cancelled ({', '.join(cancelled)})" if cancelled else "cancelled"
    decision = Decision.objects.create(
        run=run,
        task=task,
        attempt=attempt,
        action=Decision.Action.ABORT,
        reason=(
            f"Abort: {reviewer.get_username()} aborted {task.key} (escalation {escalation.pk}): "
            f"{reason}{dependants}; the run fails."
        ),
        created_at=now,
        acted_at=now,
    )
    Task.objects.filter(run=run, key__in=[task.key, *cancelled]).update(
        state=Task.State.CANCELLED, ready=False, finished_at=now
    )
    user = reviewer.get_username()
    # The run is over: nothing else of it waits for a person. Each says why it was closed.
    others = Escalation.objects.filter(run=run, status__in=Escalation.OPEN_STATES).exclude(
        pk=escalation.pk
    )
    closed = [f"escalation {pk} ({key})" for pk, key in others.values_list("pk", "task__key")]
    others.update(
        status=Escalation.Status.CLOSED,
        closed_at=now,
        acted_at=now,
        claimed_by=reviewer,
        claim_expires_at=None,
        returned_reason=f"Closed: run {run.key} failed when {user} aborted {task.key}",
    )
    run_fails = "the run failed" if run.state == Run.State.RUNNING else f"the run had {run.state}"
    escalation.returned_reason = "\n".join(
        [
            f"Aborted by {user}: {reason}; {run_fails}",
            f"Cancelled: {', '.join([task.key, *cancelled])}",
            *([f"Closed with it: {', '.join(closed)}"] if closed else []),
        ]
    )
    close(escalation, reviewer, Escalation.Status.CLOSED, now)
    Blocker.objects.filter(
        task__run=run, task__key__in=[task.key, *cancelled], cleared_at__isnull=True
    ).update(cleared_at=now)
    if run.state == Run.State.RUNNING:
        killed = [
            (line.task.key if line.task else "", tuple(line.killed))
            for line in ProgressLine.objects.filter(run=run).select_related("task")
            if line.killed
        ]
        cause = policy.failure_cause(killed=killed, cause=f"{task.key}: aborted by {who}: {reason}")
        Run.objects.filter(pk=run.pk).update(state=Run.State.FAILED, cause=cause, finished_at=now)
        notify(run.fleet, "run.failed", {"run": run.key, "task": task.key, "cause": cause})
    scheduler.mark_changed(run, [task.key, *cancelled])
    return decision


def released_by(nodes: dict[str, frontier.TaskNode], world: frontier.World, key: str) -> list[str]:
    """What an answer releases: the tasks it makes ready, the answered task first.

    Pure: `nodes` and `world` as they are once the answer is in (the task pending again, its
    escalation closed, its refuted claims replaced by the answer). A task counts only if it is in
    the safe ready frontier: the answered task, and pending work downstream of it that nothing
    holds any more. Work that still waits on a prerequisite (even one the answer releases), or
    is blocked for another reason (a capability down, an unverified claim), is not released.
    """
    ready = set(frontier.frontier(nodes, world).ready)
    below = sorted(k for k in downstream(nodes, key) if k in ready)
    return ([key] if key in ready else []) + below


def claim_recheck(*, claim: Claim, reviewer: Any) -> Claim:
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
        claim.status_reason = f"re-check asked by {reviewer.get_username()}; waiting for a verifier"
        claim.save(update_fields=["verification_pending", "status_reason"])
        scheduler.verify_after_commit(claim)
    return claim


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


def abort_reach(escalation: Escalation) -> dict[str, Any]:
    """What aborting the escalation's task would do (what `escalation_abort` does): the tasks
    cancelled, and the run's other open escalations closed when the run fails."""
    run, task = escalation.run, escalation.task
    nodes = scheduler.nodes_for(run)
    waiting = [k for k in downstream(nodes, task.key) if nodes[k].state in frontier.UNFINISHED]
    cancelled = sorted(
        Task.objects.filter(run=run, key__in=waiting)
        .exclude(state=Task.State.RUNNING)
        .values_list("key", flat=True)
    )
    others = (
        Escalation.objects.filter(run=run, status__in=Escalation.OPEN_STATES)
        .exclude(pk=escalation.pk)
        .order_by("opened_at", "pk")
        .values_list("task__key", flat=True)
    )
    return {"cancelled": [task.key, *cancelled], "others": list(others)}


def claim_check_by_hand(*, claim: Claim, reviewer: Any, verdict: str, note: str) -> Claim:
    """A reviewer verifies or refutes a claim by hand (DESIGN 4): `human_answer` evidence from
    `reviewer:<user>` with the note, the refutation handed to the retry policy, and the frontier
    recomputed after commit (`runs.claims.check_by_hand`)."""
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
            f"The note is {len(note):,} characters; keep it under {NOTE_MAX_CHARS:,}.",
            status=422,
        )
    refuse_unless_running(run, "a verdict now would change nothing.")
    if claim.status == verdict:
        raise Refusal(f"{claim.key} is already {verdict} ({claim.status_reason}).", status=409)
    return check_by_hand(claim=claim, reviewer=reviewer, verdict=verdict, note=note)


def refuse_unless_reviewer(user: Any, fleet_id: int, fleet: str) -> None:
    if not Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.REVIEWER
    ).exists():
        raise Refusal(
            f"Only a reviewer of fleet {fleet} can act on its escalations, claims and tasks: "
            "as its manager you can read them.",
            status=403,
        )


STOP = "barrier:uncertain-dependency"


@transaction.atomic
def task_release_stop(*, task: Task, reviewer: Any) -> Task:
    """Release a task's uncertain-dependency stop (DESIGN 5, rule 4): a reviewer lets its external
    effect go ahead although its dependencies are uncertain. Who and when are kept as a progress
    line of the run; the frontier is recomputed after commit, which clears the blocker."""
    run = Run.objects.select_for_update(of=("self",)).select_related("fleet").get(pk=task.run_id)
    refuse_unless_reviewer(reviewer, run.fleet_id, run.fleet.name)
    task = Task.objects.select_for_update(of=("self",)).get(pk=task.pk)
    refuse_unless_running(run, "there is nothing to release.")
    if task.released:
        raise Refusal(f"{task.key}'s uncertain-dependency stop was released already.", status=409)
    if (
        task.effect != Task.Effect.EXTERNAL
        or task.dependency_confidence != Task.Confidence.UNCERTAIN
    ):
        raise Refusal(f"{task.key} has no uncertain-dependency stop to release.", status=409)
    if task.state != Task.State.PENDING:
        raise Refusal(
            f"{task.key} is {task.state}: only a pending task waits at a stop.", status=409
        )
    now = timezone.now()
    task.released = True
    task.save(update_fields=["released"])
    ProgressLine.objects.create(
        run=run,
        task=task,
        text=(
            f"{task.key}: {reviewer.get_username()} released its uncertain-dependency stop; "
            "its external effect may go ahead"
        ),
        created_at=now,
    )
    scheduler.mark_changed(run, [task.key])
    return task
