"""The run pages' reads that need blast radius: a run's claims, and the whole run."""

from typing import Any

from django.db.models import Count, Exists, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from escalations.models import Escalation, JoinedTask
from escalations.packet_draft import missing_fields
from escalations.selectors.radius import radii_for
from fleet.access import member_fleet_ids
from runs.claims.bearing import subjects_of
from runs.models import Claim, ProgressLine, Run, Task
from runs.selectors import decision_rows, runs_visible, task_rows


def runs_of(user: Any) -> QuerySet[Run]:
    """The runs of the person's fleets: a run of any other is not found."""
    return runs_visible(member_fleet_ids(user))


def runs_listed(found: QuerySet[Run], limit: int) -> list[Run]:
    """The newest `limit` runs of `found`, each with its number of tasks (`task_count`) and of
    tasks waiting for a reviewer (`waiting`). The page is cut first and each shown run counted after
    (subqueries PostgreSQL evaluates past the LIMIT): counted by joining every run's tasks and
    escalations before the cut, the page read every task of the database to show fifty runs
    (11 s with a million tasks)."""

    def counted(rows: QuerySet[Any]) -> Coalesce:
        per_run = rows.filter(run=OuterRef("pk")).order_by().values("run")
        return Coalesce(
            Subquery(per_run.annotate(n=Count("pk")).values("n")), 0, output_field=IntegerField()
        )

    # Its tasks with a person: one escalation may hold several (a question asked twice, joined).
    # A task escalated whose escalation was returned waits on its agent for a better packet,
    # and one whose run failed waits on nobody: neither is counted.
    open_states = Escalation.OPEN_STATES
    waiting = Task.objects.filter(state=Task.State.ESCALATED).filter(
        Exists(Escalation.objects.filter(task=OuterRef("pk"), status__in=open_states))
        | Exists(
            JoinedTask.objects.filter(
                task=OuterRef("pk"), left_at__isnull=True, escalation__status__in=open_states
            )
        )
    )
    return list(
        found.order_by("-started_at", "-pk").annotate(
            task_count=counted(Task.objects.all()), waiting=counted(waiting)
        )[:limit]
    )


def claim_rows(run: Run) -> list[dict[str, Any]]:
    radii = radii_for(run)
    return [
        {
            "key": c.key,
            "task": c.task.key,
            "posted_by": c.posted_by,
            "statement": c.statement,
            "subjects": list(subjects_of(c.about, c.statement)),
            "load_bearing": c.load_bearing,
            "raised_by": c.raised_by or None,
            "status": c.status,
            "reason": c.status_reason,
            "posted_at": c.posted_at,
            "checked_at": c.checked_at,
            "blast_radius": radii.get(c.key),
        }
        for c in Claim.objects.filter(run=run).select_related("task").order_by("posted_at", "id")
    ]


# An escalation that waits: on a reviewer (open, claimed), or on the agent's better packet.
WAITING = (*Escalation.OPEN_STATES, Escalation.Status.RETURNED)


def missing_and_note(e: Escalation) -> tuple[list[str], str | None]:
    """What the agent still has to send (the draft's missing fields, or the field a reviewer
    returned the packet for), and the reviewer's note when it was returned."""
    packet = e.packet
    if e.status == Escalation.Status.RETURNED:
        missing = [e.returned_reason.split(":", 1)[0]] if e.returned_reason else []
        return missing, e.returned_reason or None
    if e.status in Escalation.OPEN_STATES and (packet is None or packet.drafted):
        return list(missing_fields(packet.content if packet else {})), None
    return [], None


def waiting_escalations(run: Run) -> dict[str, dict[str, Any]]:
    """Each task's waiting escalation, by task key, as an agent finds it without the callback:
    its id and status, the question (None while the packet is Bulkhead's draft), and what the
    agent still has to send (the draft's missing fields, or the field a reviewer returned)."""
    latest: dict[int, Escalation] = {}
    for e in Escalation.objects.filter(run=run).select_related("task", "packet").order_by("id"):
        latest[e.task_id] = e  # a task's latest escalation is the one that can still wait
    found: dict[str, dict[str, Any]] = {}
    for e in latest.values():
        if e.status not in WAITING:
            continue
        packet = e.packet
        missing, note = missing_and_note(e)
        found[e.task.key] = {
            "id": e.pk,
            "status": e.status,
            "question": (packet.smallest_unblocking_question or None) if packet else None,
            "drafted": packet is not None and packet.drafted,
            "missing": missing,
            "note": note,
            "joined": False,
        }
    # A task that joined another task's escalation waits on that one (of this run or another).
    for joined in JoinedTask.objects.filter(
        task__run=run, left_at__isnull=True, escalation__status__in=Escalation.OPEN_STATES
    ).select_related("task", "escalation", "escalation__packet"):
        shared = joined.escalation
        found[joined.task.key] = {
            "id": shared.pk,
            "status": shared.status,
            "question": (shared.packet.smallest_unblocking_question or None)
            if shared.packet
            else None,
            "drafted": False,
            "missing": [],
            "note": None,
            "joined": True,
        }
    return found


def escalation_rows(run: Run) -> list[dict[str, Any]]:
    """Every escalation of the run, newest first, with its answer once it has one; and each
    escalation a task of the run joined (its packet asked the same question), as that task's."""
    rows = []
    found = [
        (e.task.key, e)
        for e in Escalation.objects.filter(run=run).select_related(
            "task", "packet", "answer__reviewer"
        )
    ]
    found += [
        (joined.task.key, joined.escalation)
        for joined in JoinedTask.objects.filter(task__run=run)
        .exclude(left__in=[JoinedTask.Left.SPLIT, JoinedTask.Left.MOVED])
        .select_related(
            "task", "escalation__task", "escalation__packet", "escalation__answer__reviewer"
        )
    ]
    for task_key, e in sorted(found, key=lambda found: -found[1].pk):
        packet = e.packet
        missing, note = missing_and_note(e)
        answer = getattr(e, "answer", None)
        rows.append(
            {
                "id": e.pk,
                "task": task_key,
                "status": e.status,
                "reason": e.reason,
                "opened_at": e.opened_at,
                "question": (packet.smallest_unblocking_question or None) if packet else None,
                "drafted": packet is not None and packet.drafted,
                "missing": missing,
                "note": note,
                "answer": {
                    "text": answer.text,
                    "by": answer.reviewer.get_username(),
                    "at": answer.answered_at,
                }
                if answer
                else None,
            }
        )
    return rows


def run_detail(run: Run) -> dict[str, Any]:
    waiting = waiting_escalations(run)
    return {
        "run": run.key,
        "fleet": run.fleet.name,
        "title": run.title,
        "policy": run.policy,
        "state": run.state,
        "cause": run.cause or None,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "tasks": [{**row, "escalation": waiting.get(row["key"])} for row in task_rows(run)],
        "claims": claim_rows(run),
        "decisions": decision_rows(run),
        "progress": [
            {
                "task": p.task.key if p.task else None,
                "text": p.text,
                "killed": p.killed,
                "at": p.created_at,
            }
            for p in ProgressLine.objects.filter(run=run).select_related("task")
        ],
    }
