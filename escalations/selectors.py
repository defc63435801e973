"""Reads of the human desk: the queue, a packet, blast radius and the coverage of handoffs."""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from escalations import blast_radius as rule
from escalations import reports
from escalations.models import Answer, Escalation, FailurePacket
from fleet.models import Agent, Capability, Delivery, Fleet, Membership
from runs.models import (
    Artifact,
    Attempt,
    Claim,
    ClaimUse,
    Decision,
    Evidence,
    Prerequisite,
    Run,
    Task,
)


def claim_facts(
    claims: Iterable[Claim], checkable: set[int], key: Any
) -> dict[str, rule.ClaimFact]:
    facts = {}
    for claim in claims:
        unverified = claim.status == Claim.Status.UNVERIFIED
        facts[key(claim.run_id, claim.key)] = rule.ClaimFact(
            key=key(claim.run_id, claim.key),
            producer_task=key(claim.run_id, claim.task.key),
            posted_at=claim.posted_at,
            # A checked claim always has its time; an edited row without one counts from its post.
            checked_at=None if unverified else (claim.checked_at or claim.posted_at),
            status=claim.status,  # type: ignore[arg-type]
            evidence_checkable=claim.pk in checkable,
        )
    return facts


def checkable_claims(claims: Any) -> set[int]:
    """Claims whose own evidence a verifier can re-run: posted, and not another agent's text."""
    return set(
        Evidence.objects.filter(claim__in=claims, role=Evidence.Role.POSTED)
        .exclude(source__istartswith="agent:")
        .values_list("claim_id", flat=True)
    )


def one_run(run_id: int, key: str) -> str:
    return key  # within one run, a claim's or a task's key is its name


def facts_for(
    run: Run,
) -> tuple[dict[str, rule.ClaimFact], dict[str, rule.TaskFact], list[rule.ClaimUse]]:
    """The run's claims, tasks and claim uses as the pure rule's facts, in five queries."""
    claims = (
        Claim.objects.filter(run=run)
        .select_related("task")
        .only("pk", "run_id", "key", "task__key", "posted_at", "checked_at", "status")
    )
    claim_rows = list(claims)
    facts = claim_facts(claim_rows, checkable_claims(Claim.objects.filter(run=run)), one_run)
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run=run).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    tasks = {
        row["key"]: rule.TaskFact(
            key=row["key"],
            agent=row["agent__name"],
            started_at=row["started_at"],
            prerequisites=tuple(edges.get(row["pk"], ())),
            artifacts=row["artifact_count"],
        )
        for row in Task.objects.filter(run=run)
        .annotate(artifact_count=Count("artifacts"))
        .values("pk", "key", "agent__name", "started_at", "artifact_count")
    }
    uses = [
        rule.ClaimUse(claim=claim, task=task, at=at)
        for claim, task, at in ClaimUse.objects.filter(claim__run=run).values_list(
            "claim__key", "task__key", "at"
        )
    ]
    return facts, tasks, uses


def radii_for(run: Run, *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """Each claim's blast radius (DESIGN 9): agents, artifacts, minutes unchecked, tasks."""
    claims, tasks, uses = facts_for(run)
    radii = rule.blast_radii(claims=claims, tasks=tasks, uses=uses, now=now or timezone.now())
    return {
        key: {
            "agents": radius.agents,
            "artifacts": radius.artifacts,
            "minutes": radius.minutes,
            "tasks": list(radius.tasks),
        }
        for key, radius in radii.items()
    }


def handoffs_for(run: Run, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Per producer agent -> consumer agent of the run: claims handed over, checkable, refuted,
    and the median minutes a claim crossing it stayed unchecked."""
    claims, tasks, uses = facts_for(run)
    return [
        asdict(handoff)
        for handoff in rule.handoffs(
            claims=claims, tasks=tasks, uses=uses, now=now or timezone.now()
        )
    ]


def handoffs_for_fleet(
    fleet_ids: Sequence[int], *, since: datetime | None = None, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The handoffs of every run of the fleets (started since `since`), merged per fleet and
    (producer, consumer). The median is over every claim that crossed, across runs. Rows carry
    `fleet` (its name).
    """
    runs = Run.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        runs = runs.filter(started_at__gte=since)
    claims = Claim.objects.filter(run__in=runs)

    def key(run_id: int, name: str) -> str:
        return f"{run_id}:{name}"

    facts = claim_facts(
        claims.select_related("task").only(
            "pk", "run_id", "key", "task__key", "posted_at", "checked_at", "status"
        ),
        checkable_claims(claims),
        key,
    )
    uses: list[rule.ClaimUse] = []
    task_ids = set(claims.values_list("task_id", flat=True))
    for run_id, claim, task_id, task, at in ClaimUse.objects.filter(
        claim__run__in=runs
    ).values_list("claim__run_id", "claim__key", "task_id", "task__key", "at"):
        uses.append(rule.ClaimUse(claim=key(run_id, claim), task=key(run_id, task), at=at))
        task_ids.add(task_id)
    # Only producers and consumers matter for handoffs; an agent is known by its id, then named.
    tasks: dict[str, rule.TaskFact] = {}
    agents: dict[str, tuple[str, str]] = {}
    for run_id, task_key, agent_id, agent, fleet in Task.objects.filter(
        pk__in=task_ids
    ).values_list("run_id", "key", "agent_id", "agent__name", "run__fleet__name"):
        name = key(run_id, task_key)
        tasks[name] = rule.TaskFact(key=name, agent=str(agent_id), started_at=None)
        agents[str(agent_id)] = (fleet, agent)
    found = rule.handoffs(claims=facts, tasks=tasks, uses=uses, now=now or timezone.now())
    rows = [
        {
            "fleet": agents[h.producer][0],
            "producer": agents[h.producer][1],
            "consumer": agents[h.consumer][1],
            "claims": h.claims,
            "checkable": h.checkable,
            "refuted": h.refuted,
            "median_unchecked_minutes": h.median_unchecked_minutes,
        }
        for h in found
    ]
    return sorted(rows, key=lambda r: (r["fleet"], r["producer"], r["consumer"]))


# The queue, the packet page and the reports: what reviewers and managers read.

PAGE_SIZE = 50
COUNT_CAP = 1000  # "1,000+ waiting": counting past it costs more than it tells a reviewer
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
        if opened_at.tzinfo is None:
            return None
        return cls(opened_at, number)


@dataclass(frozen=True)
class QueueQuery:
    """The queue's filters, sort and place, as they are kept in the URL."""

    status: str = "waiting"
    fleet: str = ""
    agent: str = ""
    capability: str = ""
    sort: str = "oldest"
    after: Cursor | None = None
    before: Cursor | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> "QueueQuery":
        """Unknown values fall back to the defaults: a stale link still opens the queue."""
        status = params.get("status", "waiting")
        sort = params.get("sort", "oldest")
        after = Cursor.parse(params.get("after", ""))
        return cls(
            status=status if status in QUEUE_STATUSES else "waiting",
            fleet=params.get("fleet", "").strip()[:100],
            agent=params.get("agent", "").strip()[:100],
            capability=params.get("capability", "").strip()[:100],
            sort=sort if sort in SORTS else "oldest",
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

    @property
    def waiting_label(self) -> str:
        return f"{COUNT_CAP:,}+" if self.waiting > COUNT_CAP else f"{self.waiting:,}"


QUEUE_COLUMNS = (
    "id",
    "status",
    "opened_at",
    "claim_expires_at",
    "claimed_by__username",
    "reason",
    "attempt_number",
    "task__key",
    "task__title",
    "task__agent__name",
    "run_id",
    "run__key",
    "fleet_id",
    "fleet__name",
    "packet__smallest_unblocking_question",
)


def visible_escalations(user: Any) -> QuerySet[Escalation]:
    """Escalations of the fleets the person is a member of: nobody sees another fleet's."""
    return Escalation.objects.filter(fleet__memberships__user_id=user.pk or 0)


# Where member_fleet_ids leaves the person's roles ({fleet id: role}) on the user for the rest
# of the request, as Django's auth backend keeps permissions: the navigation reads them there.
FLEET_ROLES = "_fleet_roles"


def reviewed_fleet_ids(user: Any) -> set[int]:
    """The fleets whose escalations the person acts on (a manager of a fleet only reads them)."""
    roles = getattr(user, FLEET_ROLES, None)
    if roles is None:
        member_fleet_ids(user)
        roles = getattr(user, FLEET_ROLES)
    return {fleet for fleet, role in roles.items() if role == Membership.Role.REVIEWER}


def member_fleet_ids(user: Any) -> list[int]:
    roles = dict(Membership.objects.filter(user_id=user.pk or 0).values_list("fleet_id", "role"))
    setattr(user, FLEET_ROLES, roles)
    return list(roles)


def filtered_escalations(
    *, fleet_ids: Sequence[int], query: QueueQuery, now: datetime
) -> QuerySet[Escalation]:
    found = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
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
    if query.agent:
        found = found.filter(task__agent__name=query.agent)
    if query.capability:
        if connection.vendor == "postgresql":
            found = found.filter(task__capabilities__contains=[query.capability])
        else:  # SQLite has no JSON containment: match the quoted name in the stored list
            found = found.filter(task__capabilities__icontains=json.dumps(query.capability))
    return found


def escalation_queue(
    *, fleet_ids: Sequence[int], query: QueueQuery, now: datetime, limit: int = PAGE_SIZE
) -> QueuePage:
    """One page of the queue, oldest first by default, in two queries (rows and a capped count)."""
    found = filtered_escalations(fleet_ids=fleet_ids, query=query, now=now)
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
    rows = list(page.order_by(*order).values(*QUEUE_COLUMNS)[: limit + 1])
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
    return QueuePage(
        rows=rows,
        waiting=found.values("id")[: COUNT_CAP + 1].count(),
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
    row["age"] = now - row["opened_at"]
    return row


def queue_row(escalation_id: int, *, now: datetime) -> dict[str, Any] | None:
    row = Escalation.objects.filter(pk=escalation_id).values(*QUEUE_COLUMNS).first()
    return shown(row, now) if row else None


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


def claims_of_task(task: Task) -> list[Claim]:
    """The claims a task posted, and those it consumed or declared it would."""
    used = ClaimUse.objects.filter(task=task).values_list("claim_id", flat=True)
    return list(
        Claim.objects.filter(
            Q(task=task) | Q(run_id=task.run_id, key__in=list(task.consumes)) | Q(pk__in=used)
        )
        .select_related("task")
        .prefetch_related("evidence")
        .order_by("posted_at", "id")
    )


def release_preview(escalation: Escalation) -> list[str]:
    """The tasks an answer would release now (what `escalation_answer` will compute)."""
    from runs import frontier, scheduler
    from runs.release import released_by

    run = escalation.run
    nodes = scheduler.nodes_for(run)
    world = scheduler.world_for(run)
    key = escalation.task.key
    if key not in nodes:
        return []
    nodes[key] = replace(nodes[key], state="pending")
    others = tuple(e for e in world.escalations.get(key, ()) if e != str(escalation.pk))
    escalations = {k: v for k, v in world.escalations.items() if k != key}
    if others:
        escalations[key] = others
    # The answer takes the place of the task's refuted load-bearing claims (supersede_refuted).
    claims = dict(world.claims)
    for claim in Claim.objects.filter(
        task=escalation.task, status=Claim.Status.REFUTED, load_bearing=True
    ).values_list("key", flat=True):
        claims[claim] = frontier.ClaimView(status=Claim.Status.VERIFIED, load_bearing=True)
    return released_by(nodes, replace(world, escalations=escalations, claims=claims), key)


def packet_view(escalation: Escalation, *, now: datetime) -> dict[str, Any]:
    """Everything the packet page shows, the question first."""
    task = escalation.task
    run = escalation.run
    content = escalation.packet.content if escalation.packet else {}
    if not isinstance(content, dict):
        content = {}
    claims = claims_of_task(task)
    radii = radii_for(run, now=now) if claims else {}
    claim_rows = [claim_view(c, radii.get(c.key)) for c in claims]
    affected = sorted({k for c in claim_rows if c["radius"] for k in c["radius"]["tasks"]})
    answer = Answer.objects.filter(escalation=escalation).select_related("reviewer").first()
    is_open = escalation.status in Escalation.OPEN_STATES
    if is_open and run.state == Run.State.RUNNING:
        release = release_preview(escalation)
    else:
        release = list(answer.released) if answer else []
    agents = dict(Task.objects.filter(run=run, key__in=release).values_list("key", "agent__name"))
    return {
        "question": content.get("smallest_unblocking_question") or "",
        "tried": [str(t) for t in content.get("tried") or []],
        "ruled_out": [r for r in content.get("ruled_out") or [] if isinstance(r, dict)],
        "evidence": [e for e in content.get("evidence") or [] if isinstance(e, dict)],
        "options": [str(o) for o in content.get("options") or []],
        "claims": claim_rows,
        "release": [{"key": k, "agent": agents.get(k, "")} for k in release],
        "blast": {
            "tasks": affected,
            "agents": len(
                set(
                    Task.objects.filter(run=run, key__in=affected).values_list(
                        "agent_id", flat=True
                    )
                )
            ),
            "artifacts": Artifact.objects.filter(task__run=run, task__key__in=affected).count(),
            "minutes": max((c["radius"]["minutes"] for c in claim_rows if c["radius"]), default=0),
        },
        "answer": answer,
        "history": history_of(escalation),
        "reroute_to": list(
            Agent.objects.filter(fleet_id=run.fleet_id)
            .exclude(pk=task.agent_id)
            .order_by("name")
            .values("name", "role", "is_tool")
        ),
        "is_open": is_open,
    }


def claim_view(claim: Claim, radius: dict[str, Any] | None) -> dict[str, Any]:
    evidence = list(claim.evidence.all())
    posted = [e for e in evidence if e.role == Evidence.Role.POSTED]
    checkable = [e for e in posted if not e.source.lower().lstrip().startswith("agent:")]
    return {
        "id": claim.pk,
        "key": claim.key,
        "statement": claim.statement,
        "status": claim.status,
        "reason": claim.status_reason,
        "load_bearing": claim.load_bearing,
        "producer": claim.task.key,
        "pending": claim.verification_pending,
        "checked_by": claim.checked_by,
        "evidence": evidence,
        "can_recheck": claim.status == Claim.Status.UNVERIFIED and bool(checkable),
        "radius": radius,
    }


def history_of(escalation: Escalation) -> list[dict[str, Any]]:
    """The task's story, oldest first: attempts, decisions, packets, escalations, deliveries."""
    task = escalation.task
    items: list[dict[str, Any]] = []
    for a in task.attempts.select_related("agent").order_by("number"):
        items.append(
            {
                "at": a.started_at,
                "what": f"attempt {a.number} started",
                "detail": f"{a.agent.name}, prompt {a.prompt_hash}, context {a.context_hash}",
            }
        )
        if a.finished_at and a.outcome:
            failure = " ".join(
                x for x in (a.failure_kind, a.failure_signature, a.failure_message) if x
            )
            items.append(
                {
                    "at": a.finished_at,
                    "what": f"attempt {a.number} {a.outcome}",
                    "detail": failure,
                }
            )
    for d in Decision.objects.filter(task=task).order_by("created_at", "id"):
        items.append({"at": d.created_at, "what": f"decision: {d.action}", "detail": d.reason})
    for p in FailurePacket.objects.filter(task=task).select_related("agent"):
        items.append(
            {
                "at": p.submitted_at,
                "what": f"packet from {p.agent.name}",
                "detail": p.smallest_unblocking_question,
            }
        )
    for e in (
        Escalation.objects.filter(task=task).select_related("claimed_by", "answer").order_by("id")
    ):
        items.append({"at": e.opened_at, "what": f"escalation {e.pk} opened", "detail": e.reason})
        if e.status not in Escalation.OPEN_STATES and e.acted_at:
            who = e.claimed_by.get_username() if e.claimed_by else "someone"
            answer = getattr(e, "answer", None)
            # How it ended: the answer, or the note a return, reroute or abort left.
            detail = answer.text if answer else e.returned_reason.replace("\n", "; ")
            items.append(
                {
                    "at": e.acted_at,
                    "what": f"escalation {e.pk} {e.status} by {who}",
                    "detail": detail,
                }
            )
    for delivery in Delivery.objects.filter(
        fleet_id=escalation.fleet_id,
        payload__data__run=escalation.run.key,
        payload__data__task=task.key,
    ).order_by("created_at", "id")[:50]:
        items.append(
            {
                "at": delivery.created_at,
                "what": f"sent {delivery.type}",
                "detail": f"{delivery.status}"
                + (f" after {delivery.attempts} tries" if delivery.attempts > 1 else ""),
            }
        )
    return sorted(items, key=lambda item: item["at"])


# Manager reports (DESIGN 9 and the escalation health).

REPORT_RUNS = 200  # the latest runs in the window; the blast radius of each costs five queries


def reviews(user: Any, fleet_id: int) -> bool:
    """Only a fleet's reviewers act on its escalations and claims; its managers read them."""
    return Membership.objects.filter(
        user_id=user.pk or 0, fleet_id=fleet_id, role=Membership.Role.REVIEWER
    ).exists()


def managed_fleet_ids(user: Any) -> list[int]:
    return list(
        Membership.objects.filter(user_id=user.pk or 0, role=Membership.Role.MANAGER).values_list(
            "fleet_id", flat=True
        )
    )


def report_runs(
    fleet_ids: Sequence[int], *, since: datetime | None, now: datetime
) -> list[dict[str, Any]]:
    """Blast radius per run, oldest first: the worst claim on each measure, and late disasters."""
    runs = Run.objects.filter(fleet_id__in=list(fleet_ids)).select_related("fleet")
    if since is not None:
        runs = runs.filter(started_at__gte=since)
    rows = []
    for run in sorted(
        runs.order_by("-started_at", "-id")[:REPORT_RUNS], key=lambda r: r.started_at
    ):
        statuses = dict(Claim.objects.filter(run=run).values_list("key", "status"))
        radii = radii_for(run, now=now) if statuses else {}
        refuted = Claim.objects.filter(run=run, status=Claim.Status.REFUTED).values_list(
            "key", "checked_at"
        )
        made = list(Artifact.objects.filter(task__run=run).values_list("task__key", "created_at"))
        late = [
            key
            for key, checked_at in refuted
            if reports.is_late_disaster(
                checked_at,
                [at for task, at in made if task in set(radii.get(key, {}).get("tasks", ()))],
            )
        ]
        rows.append(
            {
                "run": run,
                "fleet": run.fleet.name,
                **reports.run_summary(radii, statuses),
                "late_disasters": late,
            }
        )
    return rows


def escalation_rows(fleet_ids: Sequence[int], *, since: datetime | None) -> list[dict[str, Any]]:
    found = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        found = found.filter(opened_at__gte=since)
    rows = []
    for e in found.select_related("fleet", "run", "task", "answer").order_by("opened_at", "id"):
        answer = getattr(e, "answer", None)
        rows.append(
            {
                "id": e.pk,
                "fleet": e.fleet.name,
                "run": e.run.key,
                "task": e.task.key,
                "status": e.status,
                "attempt": e.attempt_number,
                "early": e.attempt_number <= reports.EARLY_ATTEMPTS,
                "opened_at": e.opened_at,
                "first_look_minutes": reports.minutes_between(e.opened_at, e.first_looked_at),
                "answer_minutes": reports.minutes_between(
                    e.opened_at, answer.answered_at if answer else None
                ),
                "packet_to_action_minutes": reports.minutes_between(e.packet_opened_at, e.acted_at),
            }
        )
    return rows


def retry_rows(fleet_ids: Sequence[int], *, since: datetime | None) -> list[dict[str, Any]]:
    """Non-transient failures run again on the same prompt and context (should be none)."""
    attempts = Attempt.objects.filter(task__run__fleet_id__in=list(fleet_ids))
    if since is not None:
        attempts = attempts.filter(task__run__started_at__gte=since)
    facts = [
        reports.AttemptFact(
            task=f"{run}/{task}",
            number=number,
            prompt_hash=prompt,
            context_hash=context,
            failure_kind=kind,
        )
        for run, task, number, prompt, context, kind in attempts.values_list(
            "task__run__key", "task__key", "number", "prompt_hash", "context_hash", "failure_kind"
        )
    ]
    return [
        {
            "task": before.task,
            "failed_attempt": before.number,
            "failure": before.failure_kind,
            "repeat": after.number,
            "prompt_hash": after.prompt_hash,
            "context_hash": after.context_hash,
        }
        for before, after in reports.same_context_retries(facts)
    ]


def escalation_health(
    fleet_ids: Sequence[int], *, since: datetime | None, runs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Time to first look, to answer, from opening a packet to acting; early escalations against
    late disasters; escalated kept apart from failed."""
    rows = escalation_rows(fleet_ids, since=since)
    tasks = Task.objects.filter(run__fleet_id__in=list(fleet_ids))
    if since is not None:
        tasks = tasks.filter(run__started_at__gte=since)
    states = dict(tasks.values_list("state").annotate(n=Count("id")).order_by())
    return {
        "rows": rows,
        "first_look": reports.stats(r["first_look_minutes"] for r in rows),
        "answer": reports.stats(r["answer_minutes"] for r in rows),
        "packet_to_action": reports.stats(r["packet_to_action_minutes"] for r in rows),
        "never_looked_at": sum(
            1
            for r in rows
            if r["first_look_minutes"] is None and r["status"] in Escalation.OPEN_STATES
        ),
        "early": sum(1 for r in rows if r["early"]),
        "late_disasters": sum(len(r["late_disasters"]) for r in runs),
        "escalations": len(rows),
        "escalated_tasks": len({(r["run"], r["task"]) for r in rows}),
        "failed_tasks": states.get(Task.State.FAILED, 0),
        "cancelled_tasks": states.get(Task.State.CANCELLED, 0),
        "by_status": {
            status: sum(1 for r in rows if r["status"] == status)
            for status in Escalation.Status.values
        },
    }


def waiting_summary(user: Any, *, now: datetime) -> dict[str, Any]:
    """The first page after signing in: what waits for a person in the user's fleets, and why."""
    from fleet.selectors import capability_board

    fleet_ids = member_fleet_ids(user)
    waiting = Escalation.objects.filter(
        fleet_id__in=fleet_ids, status__in=Escalation.OPEN_STATES
    ).select_related("run", "task", "task__agent", "packet", "claimed_by")
    oldest = list(waiting.order_by("opened_at", "id")[:3])
    return {
        "waiting": waiting.count(),
        "oldest": [
            {
                "escalation": e,
                "question": e.packet.smallest_unblocking_question if e.packet else None,
                "age": now - e.opened_at,
            }
            for e in oldest
        ],
        "down": [row for row in capability_board(user) if row["capability"].status == "down"],
        "stops": Task.objects.filter(
            run__fleet_id__in=fleet_ids,
            run__state=Run.State.RUNNING,
            state=Task.State.PENDING,
            blockers__cleared_at__isnull=True,
            blockers__code="barrier:uncertain-dependency",
        )
        .select_related("run")
        .order_by("run_id", "position")[:10],
        "failed": Run.objects.filter(fleet_id__in=fleet_ids, state=Run.State.FAILED).order_by(
            "-finished_at", "-id"
        )[:5],
    }
