"""Who an escalation is assigned to and by when: routing a new one, handing one off, marking
oneself away, and the due-time sweep (reminders at half time, the next tier when overdue).

The sweep's state is in the database: each reminder or tier change is a row (`EscalationStep`,
one per kind and tier) written in the same transaction as its assignment and messages, so a
worker killed between two steps leaves the first done once and the second still to do.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from escalations import intake_sql, routing, routing_config
from escalations.models import (
    Assignment,
    Availability,
    Channel,
    DueRule,
    Escalation,
    EscalationStep,
    Message,
    Pool,
    PoolMember,
    RoutingRule,
)
from escalations.services import messages
from escalations.services.state import (
    NOTE_MAX_CHARS,
    lock_escalation,
    refuse_unless_open,
    unclaimed,
)
from fleet.errors import Refusal, error
from fleet.models import Fleet, Membership
from runs.models import Attempt, Task
from runs.policy import FAILURE_KINDS

SWEEP_BATCH = 500


def about(task: Task, failure_kind: str | None = None) -> routing.About:
    """What the escalation is about; `failure_kind`, the task's latest attempt's, when read
    already (with the task)."""
    if failure_kind is None:
        failure_kind = (
            Attempt.objects.filter(task=task)
            .exclude(failure_kind="")
            .order_by("-number")
            .values_list("failure_kind", flat=True)
            .first()
        )
    return routing.About(
        agent_role=task.agent.role,
        capabilities=tuple(str(c) for c in (task.capabilities or [])),
        run=task.run.key,
        failure_kind=failure_kind or "",
    )


def urgency_of(content: object) -> str:
    value = content.get("urgency") if isinstance(content, dict) else None
    return value if value in routing.URGENCIES else ""


def due_at_for(fleet_id: int, *, failure_kind: str, urgency: str, opened_at: datetime) -> Any:
    minutes = routing.due_minutes(
        routing_config.config_of(fleet_id).due_rules, failure_kind=failure_kind, urgency=urgency
    )
    return opened_at + timedelta(minutes=minutes) if minutes is not None else None


def pick_reviewer(pool: Pool, at: datetime) -> Any:
    """The pool's next reviewer (least recently assigned, not away), marked as assigned now."""
    seats = list(
        PoolMember.objects.select_for_update(of=("self",)).filter(pool=pool).order_by("user_id")
    )
    away = set(
        Availability.objects.filter(user_id__in=[s.user_id for s in seats], away=True).values_list(
            "user_id", flat=True
        )
    )
    chosen = routing.next_reviewer(
        routing.Seat(s.user_id, s.last_assigned_at, s.user_id in away) for s in seats
    )
    if chosen is None:
        return None
    PoolMember.objects.filter(pool=pool, user_id=chosen).update(last_assigned_at=at)
    return get_user_model().objects.get(pk=chosen)


@dataclass(frozen=True)
class Reviewer:
    """The reviewer a new escalation is assigned to, and where they are told."""

    id: int
    username: str
    targets: tuple[messages.Target, ...]


def next_reviewer(pool_id: int, at: datetime) -> Reviewer | None:
    """The pool's turn (`pick_reviewer`): on PostgreSQL in one statement."""
    if connection.vendor == "postgresql":
        seat = intake_sql.pick_seat(pool_id, at)
        if seat is None:
            return None
        targets: tuple[messages.Target, ...] = tuple(seat.channels)
        if not targets and seat.email:
            targets = ((None, Channel.Kind.EMAIL, seat.email),)
        return Reviewer(seat.user_id, seat.username, targets)
    user = pick_reviewer(Pool(pk=pool_id), at)
    if user is None:
        return None
    found = tuple(
        (c.pk if c else None, kind, target) for c, kind, target in messages.channels_of(user)
    )
    return Reviewer(user.pk, user.get_username(), found)


@dataclass(frozen=True)
class Routed:
    """A new escalation's due time, pool and reviewer, decided before it is written."""

    failure_kind: str
    urgency: str
    due_at: datetime | None
    next_step_at: datetime | None
    rule: routing_config.Rule | None
    reviewer: Reviewer | None
    note: str | None  # the assignment's note, when a rule routed it
    channels: tuple[messages.Target, ...]  # the fleet's, where it is announced

    @property
    def last_tier(self) -> int:
        if self.rule is None:
            return 1
        return 3 if self.rule.next_pool_id else 2

    def fields(self) -> dict[str, Any]:
        """The escalation's columns it sets."""
        return {
            "failure_kind": self.failure_kind,
            "urgency": self.urgency,
            "due_at": self.due_at,
            "next_step_at": self.next_step_at,
            "pool": self.rule.pool_id if self.rule else None,
            "next_pool": self.rule.next_pool_id if self.rule else None,
            "last_tier": self.last_tier,
            "assignee": self.reviewer.id if self.reviewer else None,
        }


def routed(*, fleet_id: int, facts: routing.About, content: object, at: datetime) -> Routed:
    """Route a new escalation (opened `at`): the fleet's cached rules decide its due time and
    pool; the pool's turn, its reviewer (marked as assigned). Runs in the opening transaction."""
    config = routing_config.config_of(fleet_id)
    urgency = urgency_of(content)
    minutes = routing.due_minutes(
        config.due_rules, failure_kind=facts.failure_kind, urgency=urgency
    )
    due_at = at + timedelta(minutes=minutes) if minutes is not None else None
    matched = routing.route([r.matching() for r in config.rules], facts)
    rule = next((r for r in config.rules if matched is not None and r.id == matched.id), None)
    reviewer = next_reviewer(rule.pool_id, at) if rule is not None else None
    last_tier = 1 if rule is None else (3 if rule.next_pool_id else 2)
    next_step = (
        routing.when_next(
            routing.Timing(
                opened_at=at, due_at=due_at, tier=1, last_tier=last_tier, done=frozenset()
            ),
            at,
        )
        if due_at is not None
        else None
    )
    return Routed(
        failure_kind=facts.failure_kind,
        urgency=urgency,
        due_at=due_at,
        next_step_at=next_step,
        rule=rule,
        reviewer=reviewer,
        note=routing_note(rule, reviewer) if rule is not None else None,
        channels=config.channels,
    )


def announce(escalation: Escalation, decided: Routed, *, at: datetime) -> None:
    """The messages of a new escalation: on the fleet's channels, and to its reviewer."""
    messages.queue_many(
        escalation,
        [
            ("opened", decided.channels, ""),
            ("assigned", decided.reviewer.targets if decided.reviewer else (), ""),
        ],
        at=at,
    )


def route_new(escalation: Escalation, *, at: datetime) -> None:
    """A new escalation, written already: its due time, its pool and reviewer, and the
    messages announcing it. Runs in the transaction that opens it."""
    task = Task.objects.select_related("agent", "run").get(pk=escalation.task_id)
    decided = routed(
        fleet_id=escalation.fleet_id,
        facts=about(task),
        content=escalation.packet.content if escalation.packet else None,
        at=at,
    )
    for name, value in decided.fields().items():
        setattr(escalation, f"{name}_id" if name in ROUTED_KEYS else name, value)
    escalation.save(update_fields=list(decided.fields()))
    if decided.note is not None:
        assigned(escalation, decided, at=at)
    announce(escalation, decided, at=at)


def assigned(escalation: Escalation, decided: Routed, *, at: datetime) -> Assignment:
    """The routing rule's assignment, in the escalation's history."""
    assert decided.rule is not None and decided.note is not None
    return Assignment.objects.create(
        escalation=escalation,
        kind=Assignment.Kind.ROUTED,
        at=at,
        tier=1,
        pool_id=decided.rule.pool_id,
        to_user_id=decided.reviewer.id if decided.reviewer else None,
        note=decided.note,
    )


ROUTED_KEYS = ("pool", "next_pool", "assignee")  # the foreign keys among `Routed.fields`


def routing_note(rule: routing_config.Rule, reviewer: Reviewer | None) -> str:
    said = [
        f"{name} {value}"
        for name, value in (
            ("agent role", rule.agent_role),
            ("capability", rule.capability),
            ("run", rule.run),
            ("failure kind", rule.failure_kind),
        )
        if value
    ]
    why = "matched " + ", ".join(said) if said else "the fleet's default rule"
    who = (
        f"its least recently assigned reviewer, {reviewer.username}"
        if reviewer
        else "nobody: every reviewer in it is away"
    )
    return f"Routed to pool {rule.pool_name} ({why}); assigned to {who}."


def packet_changed(escalation: Escalation, *, question_in: bool, at: datetime) -> None:
    """A packet filled or replaced: its urgency may set another due time, until a step is
    made; the question that fills Bulkhead's draft is announced, with it this time."""
    urgency = urgency_of(escalation.packet.content if escalation.packet else None)
    if urgency != escalation.urgency and not escalation.steps.exists():
        escalation.urgency = urgency
        escalation.due_at = due_at_for(
            escalation.fleet_id,
            failure_kind=escalation.failure_kind,
            urgency=urgency,
            opened_at=escalation.opened_at,
        )
        escalation.next_step_at = next_step_at(escalation, at)
        escalation.save(update_fields=["urgency", "due_at", "next_step_at"])
    if question_in:
        users = [escalation.assignee] if escalation.assignee else []
        messages.queue_messages(escalation, "question", users=users, fleet_channels=True, at=at)


def can_hand_off(user: Any, fleet_id: int) -> bool:
    return Membership.objects.filter(user_id=user.pk or 0, fleet_id=fleet_id).exists()


@transaction.atomic
def escalation_hand_off(*, escalation: Escalation, by: Any, to: str, note: str) -> Escalation:
    """Hand a waiting escalation to another reviewer of its fleet, with a note (kept in its
    history); the new assignee is told on their channels. A claim the one handing it off holds
    goes with it: the new assignee can act at once; while another reviewer's claim is live, it is
    refused (they are at work on it)."""
    now = timezone.now()
    escalation = lock_escalation(escalation.pk)
    if escalation.status not in Escalation.OPEN_STATES:
        raise Refusal(
            f"This escalation is {escalation.status}: only a waiting one can be handed off.",
            status=409,
        )
    # Someone else is at work on it: handing it off would leave the new reviewer unable to act.
    refuse_unless_open(escalation, by, now)
    note = note.strip()
    problems = []
    if not note:
        problems.append(error("note", "is required: say why you hand it off"))
    elif len(note) > NOTE_MAX_CHARS:
        problems.append(error("note", f"is {len(note):,} characters; at most {NOTE_MAX_CHARS:,}"))
    target = (
        get_user_model()
        .objects.filter(
            username=to.strip(),
            memberships__fleet_id=escalation.fleet_id,
            memberships__role=Membership.Role.REVIEWER,
        )
        .first()
    )
    if target is None:
        problems.append(
            error("to", f"{to.strip()[:150]!r} is not a reviewer of fleet {escalation.fleet.name}")
        )
    elif target.pk == escalation.assignee_id:
        problems.append(error("to", f"{target.get_username()} has it already"))
    if problems:
        raise Refusal(problems)
    escalation.assignee = target
    fields = ["assignee"]
    if escalation.status == Escalation.Status.CLAIMED and escalation.claimed_by_id == by.pk:
        fields += unclaimed(escalation)
    escalation.save(update_fields=fields)
    Assignment.objects.create(
        escalation=escalation,
        kind=Assignment.Kind.HANDED_OFF,
        at=now,
        tier=escalation.tier,
        pool_id=escalation.pool_id,
        to_user=target,
        by_user=by,
        note=note,
    )
    messages.queue_messages(
        escalation,
        "handed-off",
        users=[target],
        at=now,
        headline=f"Handed to you by {by.get_username()}",
        note=note,
    )
    return escalation


@transaction.atomic
def reviewer_set_away(*, user: Any, away: bool) -> Availability:
    found, _ = Availability.objects.update_or_create(
        user=user, defaults={"away": away, "changed_at": timezone.now()}
    )
    return found


def is_away(user: Any) -> bool:
    return Availability.objects.filter(user_id=user.pk or 0, away=True).exists()


# The sweep.


def timing_of(escalation: Escalation) -> routing.Timing:
    assert escalation.due_at is not None
    done = frozenset(escalation.steps.values_list("kind", "tier")) if escalation.pk else frozenset()
    return routing.Timing(
        opened_at=escalation.opened_at,
        due_at=escalation.due_at,
        tier=escalation.tier,
        last_tier=escalation.last_tier,
        done=done,
    )


def next_step_at(escalation: Escalation, now: datetime | None = None) -> datetime | None:
    if escalation.due_at is None:
        return None
    return routing.when_next(timing_of(escalation), now or timezone.now())


def managers_of(fleet_id: int) -> list[Any]:
    return list(
        get_user_model().objects.filter(
            memberships__fleet_id=fleet_id, memberships__role=Membership.Role.MANAGER
        )
    )


def step_once(escalation_id: int, now: datetime) -> str | None:
    """Make the escalation's next due step, if any, in one transaction; returns its kind."""
    with transaction.atomic():
        escalation = (
            Escalation.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("run", "task", "packet", "fleet", "assignee")
            .filter(pk=escalation_id, status__in=Escalation.OPEN_STATES, due_at__isnull=False)
            .first()
        )
        if escalation is None:
            return None
        step = routing.next_step(timing_of(escalation), now)
        if step is None:
            # Nothing due after all (a reminder overtaken by its deadline): look again when it is.
            escalation.next_step_at = next_step_at(escalation, now)
            escalation.save(update_fields=["next_step_at"])
            return None
        try:
            with transaction.atomic():
                made = EscalationStep.objects.create(
                    escalation=escalation,
                    kind=step.kind,
                    tier=step.tier,
                    due_at=step.due_at,
                    done_at=now,
                )
        except IntegrityError:
            return None  # made already (by another sweep)
        if step.kind == routing.REMINDER:
            made.reached, made.note = remind(escalation, now)
        else:
            made.reached, made.note = move_up(escalation, step.tier, now)
        made.save(update_fields=["reached", "note"])
        escalation.next_step_at = next_step_at(escalation, now)
        escalation.save(update_fields=["next_step_at"])
        return step.kind


def unreached(users: list[Any], written: list[Message]) -> str:
    """What a step says of those it was for whom no message went to: nobody to tell, or who
    has no channel (and no email address)."""
    if not users:
        return "reached nobody: nobody to tell"
    missing = [u.get_username() for u in users if not messages.channels_of(u)]
    if not missing:
        return ""
    said = f"no channel and no email address: {', '.join(sorted(missing))}"
    return ("reached nobody: " if not written else "") + said


def remind(escalation: Escalation, now: datetime) -> tuple[int, str]:
    """Remind whoever holds it; returns the messages written and whom it could not reach."""
    if escalation.assignee is not None:
        users = [escalation.assignee]
    elif escalation.tier >= escalation.last_tier:
        users = managers_of(escalation.fleet_id)
    elif escalation.pool_id:
        members = [
            m.user
            for m in PoolMember.objects.filter(pool_id=escalation.pool_id).select_related("user")
        ]
        away = set(
            Availability.objects.filter(user_id__in=[u.pk for u in members], away=True).values_list(
                "user_id", flat=True
            )
        )
        users = [u for u in members if u.pk not in away]  # those away are not disturbed
        if members and not users:
            return 0, "reached nobody: everyone in the pool is away"
    else:
        users = []
    written = messages.queue_messages(escalation, "reminder", users=users, at=now)
    return len(written), unreached(users, written)


def move_up(escalation: Escalation, tier: int, now: datetime) -> tuple[int, str]:
    """Overdue: the next pool takes it, or (last tier) the fleet's managers. Never an answer.
    Returns the messages written and whom it could not reach."""
    escalation.tier = tier
    pool = escalation.next_pool if tier < escalation.last_tier else None
    if pool is not None:
        assignee = pick_reviewer(pool, now)
        escalation.pool = pool
        users = [assignee] if assignee else [m.user for m in pool.members.select_related("user")]
        note = f"Overdue at tier {tier - 1}: moved to pool {pool.name}" + (
            f", assigned to {assignee.get_username()}." if assignee else "; everyone in it is away."
        )
        moved_to = f"pool {pool.name}" + (
            f", assigned to {assignee.get_username()}" if assignee else " (everyone in it is away)"
        )
    else:
        assignee = None
        escalation.pool = None
        users = managers_of(escalation.fleet_id)
        note = f"Overdue at tier {tier - 1}: moved to the fleet's managers."
        moved_to = "the fleet's managers" + (
            f" ({', '.join(sorted(u.get_username() for u in users))})" if users else ""
        )
    escalation.assignee = assignee
    escalation.save(update_fields=["tier", "pool", "assignee"])
    Assignment.objects.create(
        escalation=escalation,
        kind=Assignment.Kind.TIER,
        at=now,
        tier=tier,
        pool=pool,
        to_user=assignee,
        note=note,
    )
    written = messages.queue_messages(
        escalation,
        "tier",
        users=users,
        fleet_channels=True,
        at=now,
        fleet_headline=f"Overdue: moved to tier {tier}, {moved_to}",
    )
    return len(written), unreached(users, written)


def sweep(now: datetime | None = None) -> dict[str, int]:
    """Every waiting escalation with a due time: make each step that is due, once."""
    now = now or timezone.now()
    candidates = list(
        Escalation.objects.filter(status__in=Escalation.OPEN_STATES, next_step_at__lte=now)
        .order_by("next_step_at", "id")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    made = {"reminder": 0, "tier": 0}
    for escalation_id in candidates:
        while (kind := step_once(escalation_id, now)) is not None:
            made[kind] += 1
    return made


# Configuring a fleet's pools, routing rules and due times (the management commands call these).


def reviewers_of(fleet: Fleet, usernames: list[str]) -> list[Any]:
    found = {
        u.get_username(): u
        for u in get_user_model().objects.filter(
            username__in=usernames,
            memberships__fleet=fleet,
            memberships__role=Membership.Role.REVIEWER,
        )
    }
    missing = [name for name in usernames if name not in found]
    if missing:
        raise Refusal(
            [
                error(
                    "reviewers",
                    f"{', '.join(missing)} {'is not a reviewer' if len(missing) == 1 else 'are not reviewers'} "
                    f"of fleet {fleet.name}: add them with member_add NAME --fleet {fleet.name} --role reviewer",
                )
            ]
        )
    return [found[name] for name in usernames]


@transaction.atomic
def pool_set(*, fleet: Fleet, name: str, usernames: list[str]) -> Pool:
    """The pool with exactly these reviewers (those staying keep their turn)."""
    if not name or len(name) > 100 or not all(c.isalnum() or c in "-_" for c in name):
        raise Refusal(
            [error("pool", f"{name[:100]!r} is not a pool name: letters, digits, - and _")]
        )
    users = reviewers_of(fleet, usernames)
    pool, _ = Pool.objects.get_or_create(fleet=fleet, name=name)
    PoolMember.objects.filter(pool=pool).exclude(user__in=users).delete()
    for user in users:
        PoolMember.objects.get_or_create(pool=pool, user=user)
    return pool


def pool_named(fleet: Fleet, name: str, loc: str) -> Pool:
    pool = Pool.objects.filter(fleet=fleet, name=name).first()
    if pool is None:
        raise Refusal(
            [error(loc, f"fleet {fleet.name} has no pool {name[:100]!r}: create it with pool_set")]
        )
    return pool


MAX_POSITION = 2**31 - 1  # a rule's position is a PostgreSQL integer


@transaction.atomic
def route_add(
    *,
    fleet: Fleet,
    pool: str,
    next_pool: str = "",
    agent_role: str = "",
    capability: str = "",
    run: str = "",
    failure_kind: str = "",
    position: int | None = None,
) -> RoutingRule:
    if failure_kind and failure_kind not in FAILURE_KINDS:
        raise Refusal(
            [
                error(
                    "failure_kind",
                    f"{failure_kind[:50]!r} is not one of {', '.join(FAILURE_KINDS)}",
                )
            ]
        )
    for loc, value, most in (
        ("agent_role", agent_role, 100),
        ("capability", capability, 100),
        ("run", run, 200),
    ):
        if len(value) > most:
            raise Refusal([error(loc, f"is longer than {most} characters")])
    if position is not None and not 0 <= position <= MAX_POSITION:
        raise Refusal([error("position", f"{position} is out of range: from 0 to {MAX_POSITION}")])
    found = pool_named(fleet, pool, "pool")
    after = pool_named(fleet, next_pool, "next_pool") if next_pool else None
    if after is not None and after.pk == found.pk:
        raise Refusal([error("next_pool", "must be another pool than the rule's own")])
    if position is None:
        last = RoutingRule.objects.filter(fleet=fleet).order_by("-position").first()
        position = last.position + 1 if last else 0
    return RoutingRule.objects.create(
        fleet=fleet,
        position=position,
        pool=found,
        next_pool=after,
        agent_role=agent_role,
        capability=capability,
        run=run,
        failure_kind=failure_kind,
    )


@transaction.atomic
def due_set(
    *, fleet: Fleet, minutes: int, failure_kind: str = "", urgency: str = ""
) -> DueRule | None:
    """Set (or, with 0 minutes, remove) a due time by failure kind, urgency, or the default."""
    if failure_kind and urgency:
        raise Refusal([error("urgency", "a due time is by failure kind or by urgency, not both")])
    if failure_kind and failure_kind not in FAILURE_KINDS:
        raise Refusal(
            [
                error(
                    "failure_kind",
                    f"{failure_kind[:50]!r} is not one of {', '.join(FAILURE_KINDS)}",
                )
            ]
        )
    if urgency and urgency not in routing.URGENCIES:
        raise Refusal([error("urgency", f"{urgency[:50]!r} is not one of low, normal, high")])
    if minutes < 0 or minutes > 60 * 24 * 365:
        raise Refusal([error("minutes", "must be between 1 and 525600 (0 removes the due time)")])
    if minutes == 0:
        DueRule.objects.filter(fleet=fleet, failure_kind=failure_kind, urgency=urgency).delete()
        return None
    rule, _ = DueRule.objects.update_or_create(
        fleet=fleet, failure_kind=failure_kind, urgency=urgency, defaults={"minutes": minutes}
    )
    return rule
