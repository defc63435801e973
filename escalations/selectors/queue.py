"""The escalation queue: its filters and sorts in the URL, keyset pages and one row."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import urlencode

from django.db import connection
from django.db.models import (
    Count,
    Exists,
    F,
    JSONField,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce

from escalations.models import Escalation, JoinedTask, PoolMember
from escalations.routing import overdue
from escalations.selectors.waiting import shown_status
from fleet.access import member_fleets
from fleet.models import Agent, Capability, Fleet, Membership
from runs.models import Task

PAGE_SIZE = 50
COUNT_CAP = 1000  # "1,000+ waiting": counting past it costs more than it tells a reviewer


def capped(count: int) -> str:
    """A count as shown: past the cap, "1,000+"."""
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else f"{count:,}"


QUEUE_STATUSES = {
    "waiting": "Waiting (open or claimed)",
    "open": "Open (nobody on it)",
    "claimed": "Claimed",
    "answered": "Answered",
    "returned": "Returned",
    "closed": "Closed",
    "all": "All",
}
SORTS = {"oldest": "Oldest first", "newest": "Newest first"}
ASSIGNED = {
    "": "Anyone's",
    "mine": "Mine",
    "pools": "My pools",
    "unassigned": "Unassigned",
}


@dataclass(frozen=True)
class Cursor:
    """A position in the queue: the opened_at and id of the row next to it (keyset pagination)."""

    opened_at: datetime
    id: int

    def __str__(self) -> str:
        return f"{self.opened_at.isoformat()}_{self.id}"

    @classmethod
    def parse(cls, value: str) -> "Cursor | None":
        at, _, pk = value.rpartition("_")
        try:
            opened_at = datetime.fromisoformat(at)
            number = int(pk)
        except ValueError:
            return None
        if opened_at.tzinfo is None or not 0 <= number < 2**63:  # a key the table can hold
            return None
        try:  # in UTC: an offset of 16 hours or more is past what PostgreSQL takes
            return cls(opened_at.astimezone(UTC), number)
        except OverflowError:  # outside the years 1 to 9999 once in UTC
            return None


@dataclass(frozen=True)
class QueueQuery:
    """The queue's filters, sort and place, as they are kept in the URL."""

    status: str = "waiting"
    fleet: str = ""
    agent: str = ""
    capability: str = ""
    sort: str = "oldest"
    assigned: str = ""
    after: Cursor | None = None
    before: Cursor | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> "QueueQuery":
        """Unknown values fall back to the defaults: a stale link still opens the queue."""
        status = params.get("status", "waiting")
        sort = params.get("sort", "oldest")
        assigned = params.get("assigned", "")
        after = Cursor.parse(params.get("after", ""))
        return cls(
            status=status if status in QUEUE_STATUSES else "waiting",
            fleet=params.get("fleet", "").strip()[:100],
            agent=params.get("agent", "").strip()[:100],
            capability=params.get("capability", "").strip()[:100],
            sort=sort if sort in SORTS else "oldest",
            assigned=assigned if assigned in ASSIGNED else "",
            after=after,
            before=None if after else Cursor.parse(params.get("before", "")),
        )

    def params(self, *, place: bool = True, **changes: Any) -> str:
        """The query string for this view of the queue (defaults left out)."""
        query = replace(self, **changes)
        values = {
            "status": "" if query.status == "waiting" else query.status,
            "fleet": query.fleet,
            "agent": query.agent,
            "capability": query.capability,
            "sort": "" if query.sort == "oldest" else query.sort,
            "assigned": query.assigned,
        }
        if place:
            values["after"] = str(query.after) if query.after else ""
            values["before"] = str(query.before) if query.before else ""
        return urlencode({k: v for k, v in values.items() if v})


@dataclass
class QueuePage:
    rows: list[dict[str, Any]]
    waiting: int  # matching the filters, capped at COUNT_CAP + 1
    next: Cursor | None
    previous: Cursor | None
    tasks: int = 0  # the tasks waiting on them: each escalation's own and those that joined it

    @property
    def waiting_label(self) -> str:
        return capped(self.waiting)

    @property
    def tasks_label(self) -> str:
        return f"{COUNT_CAP:,}+" if self.waiting > COUNT_CAP else f"{self.tasks:,}"


QUEUE_COLUMNS = (
    "id",
    "status",
    "opened_at",
    "claim_expires_at",
    "reason",
    "attempt_number",
    "run_id",
    "fleet_id",
    "tier",
    "last_tier",
    "due_at",
    "outcome",
    "joined_waiting",
)
# What a row shows of the escalation's task, run, fleet, packet and people, each looked up by
# its key for the rows on the page (a subquery each), not joined: joined, the nine tables took
# PostgreSQL 30 ms to plan for a statement that ran in 2 (the order it would join them in).
LOOKED_UP = {  # shown as -> (the escalation's foreign key, the column it reads there)
    "claimed_by__username": ("claimed_by", "username"),
    "task__key": ("task", "key"),
    "task__title": ("task", "title"),
    "task__agent__name": ("task", "agent__name"),
    "run__key": ("run", "key"),
    "fleet__name": ("fleet", "name"),
    "packet__smallest_unblocking_question": ("packet", "smallest_unblocking_question"),
    "packet__drafted": ("packet", "drafted"),
    "assignee__username": ("assignee", "username"),
    "pool__name": ("pool", "name"),
}


def queue_rows(found: QuerySet[Escalation]) -> "QuerySet[Escalation, dict[str, Any]]":
    """The rows as the queue shows them: `QUEUE_COLUMNS` and `LOOKED_UP` (see `named`)."""
    looked_up = {}
    for n, (key, column) in enumerate(LOOKED_UP.values()):
        model = cast(type[Model], Escalation._meta.get_field(key).related_model)
        its = model._default_manager.filter(pk=OuterRef(f"{key}_id")).values(column)[:1]
        looked_up[f"shown_{n}"] = Subquery(its)
    return with_joined(found).annotate(**looked_up).values(*QUEUE_COLUMNS, *looked_up)


def named(row: dict[str, Any]) -> dict[str, Any]:
    for n, name in enumerate(LOOKED_UP):
        row[name] = row.pop(f"shown_{n}")
    return row


def with_joined(found: QuerySet[Escalation]) -> QuerySet[Escalation]:
    """Each escalation with the count of the tasks that joined it and still wait."""
    waiting = (
        JoinedTask.objects.filter(escalation=OuterRef("pk"), left_at__isnull=True)
        .order_by()
        .values("escalation")
        .annotate(n=Count("id"))
        .values("n")
    )
    return found.annotate(joined_waiting=Coalesce(Subquery(waiting), 0))


def visible_escalations(user: Any) -> QuerySet[Escalation]:
    """Escalations of the fleets the person is a member of: nobody sees another fleet's."""
    return Escalation.objects.filter(fleet__in=member_fleets(user))


def assigned_to(user_id: int, assigned: str) -> Q:
    """ "mine": assigned to the person; "my pools": in a pool they sit in, or at the managers'
    tier of a fleet they manage; "unassigned": nobody has it."""
    if assigned == "mine":
        return Q(assignee_id=user_id)
    if assigned == "pools":
        # The pools and the managed fleets first, as lists: as two subqueries joined by OR,
        # PostgreSQL filtered every waiting escalation through both, and a reviewer who sits
        # in no pool had all of them read to find none.
        managed = Membership.objects.filter(user_id=user_id, role=Membership.Role.MANAGER)
        seats = list(PoolMember.objects.filter(user_id=user_id).values_list("pool_id", flat=True))
        fleets = list(managed.values_list("fleet_id", flat=True))
        mine = Q(pk__in=[])  # none, unless one of the two below
        if seats:
            mine |= Q(pool_id__in=seats)
        if fleets:
            mine |= Q(pool__isnull=True, tier__gt=1, tier__gte=F("last_tier"), fleet_id__in=fleets)
        return mine
    if assigned == "unassigned":
        return Q(assignee__isnull=True)
    return Q()


def filtered_escalations(
    *, fleet_ids: Sequence[int], query: QueueQuery, now: datetime, user_id: int = 0
) -> QuerySet[Escalation]:
    found = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
    if query.assigned:
        found = found.filter(assigned_to(user_id, query.assigned))
    if query.status == "waiting":
        found = found.filter(status__in=Escalation.OPEN_STATES)
    elif query.status == "open":
        # A claim that has expired is open again, whatever the row still says.
        found = found.filter(
            Q(status=Escalation.Status.OPEN)
            | Q(status=Escalation.Status.CLAIMED, claim_expires_at__lte=now)
        )
    elif query.status == "claimed":
        found = found.filter(status=Escalation.Status.CLAIMED, claim_expires_at__gt=now)
    elif query.status != "all":
        found = found.filter(status=query.status)
    if query.fleet:
        found = found.filter(fleet__name=query.fleet)
    # The task's agent and capabilities are read from each escalation's own task (a subquery
    # each, one probe of its key), not joined: joined, PostgreSQL read and hashed every task of
    # the database to count the first thousand matches (800 ms with a million tasks).
    its_task = Task.objects.filter(pk=OuterRef("task_id"))
    if query.agent:
        # Its own task's agent, or the agent of a task that joined it and still waits on it.
        joined = JoinedTask.objects.filter(
            escalation=OuterRef("pk"), left_at__isnull=True, task__agent__name=query.agent
        )
        agents = Agent.objects.filter(name=query.agent).values("id")
        its_agent = Subquery(its_task.values("agent_id")[:1])
        found = found.alias(its_agent=its_agent).filter(Q(its_agent__in=agents) | Exists(joined))
    if query.capability:
        if connection.vendor == "postgresql":
            its = Subquery(its_task.values("capabilities")[:1], output_field=JSONField())
            found = found.alias(its_capabilities=its).filter(
                its_capabilities__contains=[query.capability]  # type: ignore[misc]
            )
        else:  # SQLite has no JSON containment: match the quoted name in the stored list
            found = found.filter(task__capabilities__icontains=json.dumps(query.capability))
    return found


def escalation_queue(
    *,
    fleet_ids: Sequence[int],
    query: QueueQuery,
    now: datetime,
    limit: int = PAGE_SIZE,
    user_id: int = 0,
) -> QueuePage:
    """One page of the queue, oldest first by default, in two queries (rows and a capped count)."""
    found = filtered_escalations(fleet_ids=fleet_ids, query=query, now=now, user_id=user_id)
    newest = query.sort == "newest"
    cursor = query.after or query.before
    backwards = query.before is not None
    if cursor is not None:
        later = newest == backwards  # walking towards later rows
        # The bound on opened_at alone says nothing new; it is where the index scan starts,
        # rather than at the queue's first row.
        if later:
            bound = Q(opened_at__gte=cursor.opened_at)
            place = Q(opened_at__gt=cursor.opened_at) | Q(
                opened_at=cursor.opened_at, id__gt=cursor.id
            )
        else:
            bound = Q(opened_at__lte=cursor.opened_at)
            place = Q(opened_at__lt=cursor.opened_at) | Q(
                opened_at=cursor.opened_at, id__lt=cursor.id
            )
        page = found.filter(bound, place)
    else:
        page = found
    ascending = newest == backwards
    order = ("opened_at", "id") if ascending else ("-opened_at", "-id")
    rows = [named(row) for row in queue_rows(page).order_by(*order)[: limit + 1]]
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        rows.reverse()
    for row in rows:
        shown(row, now)
    first = Cursor(rows[0]["opened_at"], rows[0]["id"]) if rows else None
    last = Cursor(rows[-1]["opened_at"], rows[-1]["id"]) if rows else None
    has_next = more if not backwards else True
    has_previous = (more if backwards else cursor is not None) and bool(rows)
    waiting = found.values("id")[: COUNT_CAP + 1].count()
    joined = 0
    if waiting <= COUNT_CAP:
        joined = JoinedTask.objects.filter(
            left_at__isnull=True, escalation__in=found.values("id")
        ).count()
    return QueuePage(
        rows=rows,
        waiting=waiting,
        tasks=waiting + joined,
        next=last if has_next and rows else None,
        previous=first if has_previous else None,
    )


def shown(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A queue row as a reviewer reads it: an expired claim is open again."""
    claimed = row["status"] == Escalation.Status.CLAIMED and (
        row["claim_expires_at"] is not None and row["claim_expires_at"] > now
    )
    row["claimed"] = claimed
    if row["status"] == Escalation.Status.CLAIMED and not claimed:
        row["status"] = Escalation.Status.OPEN
    row["claimed_by"] = row["claimed_by__username"] if claimed else None
    row["question"] = row["packet__smallest_unblocking_question"] or ""
    row["drafted"] = bool(row["packet__drafted"])
    row["age"] = now - row["opened_at"]
    row["assignee"] = row["assignee__username"]
    row["managers"] = (
        row["assignee"] is None and row["tier"] > 1 and row["tier"] >= row["last_tier"]
    )
    row["overdue"] = row["status"] in Escalation.OPEN_STATES and overdue(row["due_at"], now)
    row["status_label"] = shown_status(row["status"], row["outcome"])
    return row


def queue_row(escalation_id: int, *, now: datetime) -> dict[str, Any] | None:
    row = queue_rows(Escalation.objects.filter(pk=escalation_id)).first()
    return shown(named(row), now) if row else None


def queue_choices(fleet_ids: Sequence[int]) -> dict[str, list[str]]:
    """What the filters offer: the person's fleets, their agents and capabilities."""
    ids = list(fleet_ids)
    return {
        "fleets": list(
            Fleet.objects.filter(pk__in=ids).order_by("name").values_list("name", flat=True)
        ),
        "agents": sorted(
            set(Agent.objects.filter(fleet_id__in=ids).values_list("name", flat=True))
        ),
        "capabilities": sorted(
            set(Capability.objects.filter(fleet_id__in=ids).values_list("name", flat=True))
        ),
    }
