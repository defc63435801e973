"""A packet's intake on PostgreSQL, in raw SQL: the writes of a new (or joined) escalation in one
statement each, and a pool's next reviewer picked and marked in one.

The ORM writes the same rows one statement at a time (the embedded default, SQLite, takes that
path: `escalations.services.packet`); here data-modifying CTEs write them together, so a packet
costs a few statements whatever it sets off. Every column is set, the ones the ORM fills from
its defaults included (timestamps, JSON lists, empty strings): a row written here reads back as
one written by the ORM. Only the services call these, in their transaction.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import BooleanField, CharField, IntegerField
from django.db.models.expressions import RawSQL

from escalations.models import (
    Answer,
    Assignment,
    Availability,
    Channel,
    Escalation,
    FailurePacket,
    JoinedTask,
    PoolMember,
)
from fleet.models import Delivery
from fleet.prepared import prepared_cursor
from runs.models import Attempt, FrontierChange, Hold, Task


def table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@dataclass(frozen=True)
class NewPacket:
    """The agent's packet, as `FailurePacket` stores it."""

    task_id: int
    agent_id: Any
    content: object
    question: str
    question_key: str
    dedup_key: str
    submitted_at: datetime
    from_draft: list[str]
    checks_pending: bool


@dataclass(frozen=True)
class Change:
    """The run's frontier change (`FrontierChange`), when not gathered by a batch."""

    run_id: int
    keys: list[str]
    created_at: datetime


PACKET = """
    INSERT INTO {packet} (task_id, agent_id, content, smallest_unblocking_question, question_key,
        dedup_key, submitted_at, drafted, from_draft, checks, checks_pending, returned_note,
        returned_at)
    VALUES (%(task)s, %(agent)s, %(content)s::jsonb, %(question)s, %(question_key)s,
        %(dedup_key)s, %(submitted_at)s, false, %(from_draft)s::jsonb, '[]'::jsonb,
        %(checks_pending)s, '', NULL)
    RETURNING id
"""

ESCALATED = """
    UPDATE {task} SET state = 'escalated', ready = false WHERE id = %(task)s RETURNING id
"""

CHANGE = """
    INSERT INTO {change} (run_id, created_at, keys, capability, claims, may_hold)
    SELECT %(change_run)s, %(change_at)s, %(change_keys)s::jsonb, '', '[]'::jsonb, true
    WHERE %(change)s
    RETURNING id
"""


def packet_params(packet: NewPacket, change: Change | None) -> dict[str, Any]:
    return {
        "task": packet.task_id,
        "agent": packet.agent_id,
        "content": json.dumps(packet.content),
        "question": packet.question,
        "question_key": packet.question_key,
        "dedup_key": packet.dedup_key,
        "submitted_at": packet.submitted_at,
        "from_draft": json.dumps(packet.from_draft),
        "checks_pending": packet.checks_pending,
        "change": change is not None,
        "change_run": change.run_id if change else None,
        "change_at": change.created_at if change else None,
        "change_keys": json.dumps(change.keys if change else []),
    }


def tables() -> dict[str, str]:
    return {
        "packet": table(FailurePacket),
        "answer": table(Answer),
        "escalation": table(Escalation),
        "hold": table(Hold),
        "assignment": table(Assignment),
        "task": table(Task),
        "change": table(FrontierChange),
        "delivery": table(Delivery),
        "joined": table(JoinedTask),
        "seat": table(PoolMember),
        "availability": table(Availability),
        "channel": table(Channel),
        "user": table(get_user_model()),
    }


# What a packet needs to know of its task, read with it (`runs.ownership.run_and_task`): plain
# subqueries on the task's row ("runs_task"), portable to SQLite, cheap to put together (the
# ORM's own expressions for them cost more Python than the rest of the packet).
FACTS = {
    "attempts_made": ("(SELECT COUNT(*) FROM {attempt} a WHERE a.task_id = {row})", IntegerField),
    "any_returned": (
        "EXISTS(SELECT 1 FROM {packet} p WHERE p.task_id = {row} AND p.returned_at IS NOT NULL)",
        BooleanField,
    ),
    # A reviewer answered an escalation the task waited on, its own or (joined) another's.
    "any_answered": (
        "EXISTS(SELECT 1 FROM ({own} {fence}) e JOIN {answer} a ON a.escalation_id = e.id)"
        " OR EXISTS(SELECT 1 FROM {joined} j WHERE j.task_id = {row} AND j.\"left\" = 'answered')",
        BooleanField,
    ),
    "failure_kind": (
        "(SELECT a.failure_kind FROM {attempt} a WHERE a.task_id = {row} AND a.failure_kind <> ''"
        " ORDER BY a.number DESC LIMIT 1)",
        CharField,
    ),
    "waits_joined": (
        "EXISTS(SELECT 1 FROM {joined} j WHERE j.task_id = {row} AND j.left_at IS NULL)",
        BooleanField,
    ),
    # The task's own escalations first ({fence}: nothing else narrows that read): read through
    # the queue's indexes, the planner went through every waiting escalation whenever its
    # statistics had not caught up with the queue.
    "escalation_waits": (
        "EXISTS(SELECT 1 FROM ({own} {fence}) e WHERE e.status IN ('open', 'claimed'))",
        BooleanField,
    ),
    "latest_escalation": (
        "(SELECT e.status FROM ({own} {fence}) e ORDER BY e.id DESC LIMIT 1)",
        CharField,
    ),
}
OWN = "SELECT e.id, e.status FROM {escalation} e WHERE e.task_id = {row}"
WAITING = """e.fleet_id = %s AND e.status IN ('open', 'claimed') AND e.task_id <> {row}
        AND e.id NOT IN (
            SELECT j.escalation_id FROM {joined} j WHERE j.task_id = {row} AND j."left" = 'split'
        )"""
SHARED = """(
    SELECT e.id FROM {escalation} e JOIN {packet} p ON p.id = e.packet_id
    WHERE NOT p.drafted AND ({same}) AND {waiting}
    ORDER BY e.opened_at, e.id
    LIMIT 1
)"""
# On PostgreSQL led by the packets that ask the same (their question and dedup keys are
# indexed), then each one's escalation by its packet (OFFSET 0 keeps the other conditions out
# of that probe, and the planner from turning the join round): led by the escalations, the
# planner read every waiting escalation of the fleet whenever its statistics had not caught
# up with the queue.
SHARED_LED_BY_PACKETS = """(
    SELECT e.id FROM {packet} p
    CROSS JOIN LATERAL (
        SELECT e.id, e.fleet_id, e.status, e.task_id, e.opened_at FROM {escalation} e
        WHERE e.packet_id = p.id OFFSET 0
    ) e
    WHERE NOT p.drafted AND ({same}) AND {waiting}
    ORDER BY e.opened_at, e.id
    LIMIT 1
)"""


def packet_facts(
    *, fleet_id: int, question_key: str, dedup_key: str, asks: bool
) -> dict[str, RawSQL]:
    """The task's attempts and its latest failure kind, whether a packet of it was returned or
    answered, whether it waits on an escalation (its own or, joined, another's) and the status
    of its latest; with `asks`, the oldest waiting escalation of the fleet whose packet asks the same
    question (`packets.same_question`: the same dedup_key, or the same normalised question when
    either has none), not one it was split off from."""
    names = {
        **tables(),
        "attempt": table(Attempt),
        "row": f"{table(Task)}.{connection.ops.quote_name('id')}",
        # A subquery PostgreSQL reads as written, its conditions kept out (SQLite: as written).
        "fence": "OFFSET 0" if connection.vendor == "postgresql" else "",
    }
    names["own"] = OWN.format(**names)
    facts = {
        name: RawSQL(sql.format(**names), (), output_field=field())  # noqa: S611
        for name, (sql, field) in FACTS.items()
    }
    if dedup_key:
        same, params = "p.dedup_key = %s", [dedup_key]
        if question_key:
            same += " OR (p.question_key = %s AND p.dedup_key = '')"
            params.append(question_key)
    elif question_key:
        same, params = "p.question_key = %s", [question_key]
    else:
        asks = False
    if asks:
        shared = SHARED_LED_BY_PACKETS if connection.vendor == "postgresql" else SHARED
        waiting = WAITING.format(**names)
        facts["shared_escalation"] = RawSQL(  # noqa: S611
            shared.format(**names, same=same, waiting=waiting),  # noqa: S608
            (*params, fleet_id),
            output_field=IntegerField(),
        )
    return facts


@dataclass(frozen=True)
class Opened:
    packet_id: int
    escalation_id: int
    delivery_id: int | None


# The statements are put together from the snippets above and table names from the models' own
# metadata; every value is a parameter.
OPEN = (
    """
    WITH packet AS ("""  # noqa: S608
    + PACKET
    + """), escalation AS (
        INSERT INTO {escalation} (fleet_id, run_id, task_id, packet_id, status, reason,
            attempt_number, opened_at, claimed_by_id, claim_expires_at, first_looked_at,
            packet_opened_at, acted_at, returned_reason, closed_at, assignee_id, pool_id, tier,
            last_tier, next_pool_id, due_at, next_step_at, urgency, failure_kind, outcome)
        SELECT %(fleet)s, %(run)s, %(task)s, packet.id, 'open', %(reason)s, %(attempt_number)s,
            %(opened_at)s, NULL, NULL, NULL, NULL, NULL, '', NULL, %(assignee)s, %(pool)s, 1,
            %(last_tier)s, %(next_pool)s, %(due_at)s, %(next_step_at)s, %(urgency)s,
            %(failure_kind)s, ''
        FROM packet
        RETURNING id
    ), hold AS (
        INSERT INTO {hold} (task_id, code, placed_at, lifted_at)
        SELECT %(task)s, 'escalation:' || escalation.id, %(opened_at)s, NULL FROM escalation
        RETURNING id
    ), assignment AS (
        INSERT INTO {assignment} (escalation_id, kind, at, tier, pool_id, to_user_id, by_user_id,
            note)
        SELECT escalation.id, 'routed', %(opened_at)s, 1, %(pool)s, %(assignee)s, NULL, %(note)s
        FROM escalation WHERE %(routed)s
        RETURNING id
    ), task AS ("""
    + ESCALATED
    + """), change AS ("""
    + CHANGE
    + """), delivery AS (
        INSERT INTO {delivery} (fleet_id, webhook_id, type, payload, status, attempts,
            next_attempt_at, last_status_code, last_error, created_at, delivered_at)
        SELECT %(fleet)s, %(webhook_id)s, %(delivery_type)s,
            jsonb_set(%(payload)s::jsonb, '{{data,escalation}}', to_jsonb(escalation.id)),
            'pending', 0, %(delivery_at)s, NULL, '', %(delivery_at)s, NULL
        FROM escalation WHERE %(notify)s
        RETURNING id
    )
    SELECT packet.id, escalation.id, (SELECT id FROM delivery),
        (SELECT count(*) FROM hold), (SELECT count(*) FROM assignment),
        (SELECT count(*) FROM task), (SELECT count(*) FROM change)
    FROM packet, escalation
"""
)


def open_escalation(
    *,
    packet: NewPacket,
    change: Change | None,
    fleet_id: int,
    run_id: int,
    reason: str,
    attempt_number: int,
    opened_at: datetime,
    routed: dict[str, Any],
    delivery: Delivery | None,
) -> Opened:
    """Store the packet and open its escalation, already routed (`routed`: its assignee, pool,
    last_tier, next_pool, due_at, next_step_at, urgency, failure_kind, and the routing `note`
    when a rule matched), with its hold, the task escalated, the run's frontier change and the
    `escalation.opened` delivery (its payload's `data.escalation` is the new escalation's id)."""
    params = {
        **packet_params(packet, change),
        "fleet": fleet_id,
        "run": run_id,
        "reason": reason,
        "attempt_number": attempt_number,
        "opened_at": opened_at,
        "routed": routed["note"] is not None,
        "notify": delivery is not None,
        "webhook_id": delivery.webhook_id if delivery else None,
        "delivery_type": delivery.type if delivery else None,
        "payload": json.dumps(delivery.payload if delivery else {}),
        "delivery_at": delivery.next_attempt_at if delivery else None,
        **routed,
    }
    with prepared_cursor() as cursor:
        cursor.execute(OPEN.format(**tables()), params)
        packet_id, escalation_id, delivery_id, *_ = cursor.fetchone()
    return Opened(packet_id, escalation_id, delivery_id)


JOIN = (
    """
    WITH packet AS ("""  # noqa: S608
    + PACKET
    + """), joined AS (
        INSERT INTO {joined} (escalation_id, task_id, packet_id, joined_at, left_at, "left", note)
        SELECT %(escalation)s, %(task)s, packet.id, %(submitted_at)s, NULL, '', ''
        FROM packet
        RETURNING id
    ), hold AS (
        INSERT INTO {hold} (task_id, code, placed_at, lifted_at)
        VALUES (%(task)s, %(code)s, %(submitted_at)s, NULL)
        ON CONFLICT (task_id, code) DO UPDATE SET placed_at = EXCLUDED.placed_at, lifted_at = NULL
        RETURNING id
    ), task AS ("""
    + ESCALATED
    + """), change AS ("""
    + CHANGE
    + """)
    SELECT packet.id, joined.id, (SELECT count(*) FROM hold), (SELECT count(*) FROM task),
        (SELECT count(*) FROM change)
    FROM packet, joined
"""
)


def join_escalation(
    *, packet: NewPacket, change: Change | None, escalation_id: int, code: str
) -> tuple[int, int]:
    """Store the packet and have its task wait on the escalation (`JoinedTask`, the same hold,
    the task escalated, the run's frontier change); returns the packet's and the join's ids."""
    params = {**packet_params(packet, change), "escalation": escalation_id, "code": code}
    with prepared_cursor() as cursor:
        cursor.execute(JOIN.format(**tables()), params)
        packet_id, joined_id, *_ = cursor.fetchone()
    return packet_id, joined_id


@dataclass(frozen=True)
class Seat:
    """The reviewer a pool's turn gave the escalation, with where they are told."""

    user_id: int
    username: str
    email: str
    channels: list[tuple[int, str, str]]  # (id, kind, target), by id


PICK = """
    WITH seats AS (
        SELECT id, user_id, last_assigned_at FROM {seat} WHERE pool_id = %(pool)s
        ORDER BY user_id
        FOR UPDATE
    ), chosen AS (
        SELECT seats.id, seats.user_id FROM seats
        WHERE NOT EXISTS (
            SELECT 1 FROM {availability} a WHERE a.user_id = seats.user_id AND a.away
        )
        ORDER BY seats.last_assigned_at ASC NULLS FIRST, seats.user_id
        LIMIT 1
    ), marked AS (
        UPDATE {seat} AS seat SET last_assigned_at = %(at)s FROM chosen
        WHERE seat.id = chosen.id
        RETURNING seat.user_id
    )
    SELECT u.id, u.{username}, u.{email},
        COALESCE((
            SELECT json_agg(json_build_array(c.id, c.kind, c.target) ORDER BY c.id)
            FROM {channel} c WHERE c.user_id = u.id
        ), '[]')
    FROM marked JOIN {user} u ON u.id = marked.user_id
"""


def pick_seat(pool_id: int, at: datetime) -> Seat | None:
    """The pool's next reviewer (least recently assigned, not away), marked as assigned `at`:
    its seats locked first, so two escalations routed at once go to two reviewers in turn."""
    user = get_user_model()
    names = {
        **tables(),
        "username": connection.ops.quote_name(user.USERNAME_FIELD),
        "email": connection.ops.quote_name(user.get_email_field_name()),
    }
    with prepared_cursor() as cursor:
        cursor.execute(PICK.format(**names), {"pool": pool_id, "at": at})
        row = cursor.fetchone()
    if row is None:
        return None
    channels = row[3] if isinstance(row[3], list) else json.loads(row[3])
    return Seat(row[0], row[1], row[2] or "", [tuple(c) for c in channels])  # type: ignore[misc]
