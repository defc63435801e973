"""The manager reports: blast radius per run, escalation health, same-context retries."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Min, Q

from escalations import reports
from escalations.models import Escalation, EscalationStep, JoinedTask
from escalations.routing import overdue
from escalations.selectors.radius import REVIEWER, radii_for_runs
from runs.models import Artifact, Attempt, Claim, Run, Task

REPORT_RUNS = 200  # the latest runs in the window


def report_runs(
    fleet_ids: Sequence[int], *, since: datetime | None, now: datetime
) -> list[dict[str, Any]]:
    """Blast radius per run, oldest first: the worst claim on each measure, and late disasters.
    The runs are read together (a few statements, not eight a run: the report of 200 runs sent
    1,600)."""
    runs = Run.objects.filter(fleet_id__in=list(fleet_ids)).select_related("fleet")
    if since is not None:
        runs = runs.filter(started_at__gte=since)
    shown = sorted(runs.order_by("-started_at", "-id")[:REPORT_RUNS], key=lambda r: r.started_at)
    ids = [run.pk for run in shown]
    # The agents' claims: a reviewer's answer is a claim too, and travels nowhere unchecked.
    statuses: dict[int, dict[str, str]] = {run_id: {} for run_id in ids}
    for run_id, key, status in (
        Claim.objects.filter(run_id__in=ids)
        .exclude(posted_by__startswith=REVIEWER)
        .values_list("run_id", "key", "status")
    ):
        statuses[run_id][key] = status
    claimed = [run_id for run_id in ids if statuses[run_id]]
    radii_of = radii_for_runs(claimed, now=now)
    refuted: dict[int, list[tuple[str, datetime | None]]] = {run_id: [] for run_id in ids}
    # When it was found wrong: its first refuting verdict, not its first check (a claim
    # verified first and refuted later was found wrong later).
    for run_id, key, checked_at, refuted_at in (
        Claim.objects.filter(run_id__in=ids, status=Claim.Status.REFUTED)
        .annotate(
            refuted_at=Min("evidence__created_at", filter=Q(evidence__verdict=Claim.Status.REFUTED))
        )
        .values_list("run_id", "key", "checked_at", "refuted_at")
    ):
        refuted[run_id].append((key, refuted_at or checked_at))
    made: dict[int, list[tuple[str, datetime]]] = {run_id: [] for run_id in ids}
    for run_id, task, at in Artifact.objects.filter(task__run_id__in=ids).values_list(
        "task__run_id", "task__key", "created_at"
    ):
        made[run_id].append((task, at))
    rows = []
    for run in shown:
        radii = {
            key: radius
            for key, radius in radii_of.get(run.pk, {}).items()
            if key in statuses[run.pk]
        }
        # Each late disaster with the artifacts built on it before it was found wrong.
        late: dict[str, int] = {}
        for key, found_at in refuted[run.pk]:
            reached = set(radii.get(key, {}).get("tasks", ()))
            built = [at for task, at in made[run.pk] if task in reached]
            if reports.is_late_disaster(found_at, built):
                late[key] = sum(1 for at in built if found_at is not None and at <= found_at)
        rows.append(
            {
                "run": run,
                "fleet": run.fleet.name,
                **reports.run_summary(radii, statuses[run.pk]),
                "late_disasters": list(late),
                "late_claims": late_claims(run, late, radii),
            }
        )
    return rows


def late_claims(run: Run, late: Mapping[str, int], radii: dict[str, Any]) -> list[dict[str, Any]]:
    """Each late disaster with what a manager needs to act on it: the claim (its id, for the
    link), the boundary it crossed unchecked (producer agent → the agents it reached) and the
    artifacts built on it before it was found wrong."""
    found = []
    for claim in Claim.objects.filter(run=run, key__in=list(late)).select_related("task__agent"):
        reached = radii.get(claim.key, {}) or {}
        agents = sorted(
            set(
                Task.objects.filter(run=run, key__in=list(reached.get("tasks", ())))
                .exclude(agent=claim.task.agent)
                .values_list("agent__name", flat=True)
            )
        )
        found.append(
            {
                "id": claim.pk,
                "key": claim.key,
                "statement": claim.statement,
                "producer": claim.task.agent.name,
                "consumers": agents,
                "artifacts": late[claim.key],
            }
        )
    return found


def escalation_rows(fleet_ids: Sequence[int], *, since: datetime | None) -> list[dict[str, Any]]:
    """Each escalation of the window, oldest first, with its times. Read as values, not models:
    a report of 100,000 escalations built 400,000 model instances (the escalation, its fleet,
    run, task and answer) for the dozen values each row shows."""
    found = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        found = found.filter(opened_at__gte=since)
    rows = []
    for e in found.order_by("opened_at", "id").values(
        "id", "fleet__name", "run__key", "task__key", "status", "outcome", "attempt_number",
        "opened_at", "first_looked_at", "answer__answered_at", "packet_opened_at", "acted_at",
    ):  # fmt: skip
        rows.append(
            {
                "id": e["id"],
                "fleet": e["fleet__name"],
                "run": e["run__key"],
                "task": e["task__key"],
                "status": e["status"],
                "outcome": e["outcome"] or "",  # how a closed one closed: rerouted, aborted, ...
                "attempt": e["attempt_number"],
                "early": e["attempt_number"] <= reports.EARLY_ATTEMPTS,
                "opened_at": e["opened_at"],
                "first_look_minutes": reports.minutes_between(e["opened_at"], e["first_looked_at"]),
                "answer_minutes": reports.minutes_between(e["opened_at"], e["answer__answered_at"]),
                "packet_to_action_minutes": reports.minutes_between(
                    e["packet_opened_at"], e["acted_at"]
                ),
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
    # The runs first, then their tasks by run (an index of tasks by run and state): joined to
    # the runs, PostgreSQL read every task of the database to count one fleet's (0.2-0.4 s on
    # each report with a million tasks).
    in_window = Run.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        in_window = in_window.filter(started_at__gte=since)
    tasks = Task.objects.filter(run_id__in=list(in_window.values_list("id", flat=True)))
    states = dict(tasks.values_list("state").annotate(n=Count("id")).order_by())
    # Handed to a person: each escalation's own task, and each task that joined one (its
    # question was the same, and it waited on the same answer).
    escalations = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        escalations = escalations.filter(opened_at__gte=since)
    joined = JoinedTask.objects.filter(escalation__in=escalations.values("id"))
    handed = set(escalations.values_list("task_id", flat=True))
    handed |= set(joined.values_list("task_id", flat=True))
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
        "escalated_tasks": len(handed),
        "failed_tasks": states.get(Task.State.FAILED, 0),
        "cancelled_tasks": states.get(Task.State.CANCELLED, 0),
        "by_status": {
            status: sum(1 for r in rows if r["status"] == status)
            for status in Escalation.Status.values
        },
    }


def timeliness_report(
    fleet_ids: Sequence[int], *, since: datetime | None, now: datetime
) -> dict[str, list[dict[str, Any]]]:
    """Reaching reviewers in time, per fleet and per reviewer (who answered, else the assignee)."""
    found = Escalation.objects.filter(fleet_id__in=list(fleet_ids))
    if since is not None:
        found = found.filter(opened_at__gte=since)
    name = get_user_model().USERNAME_FIELD
    found = found.annotate(
        # Reminders that reached someone (a step made before they were counted is taken as one).
        reminders=Count(
            "steps",
            filter=Q(steps__kind=EscalationStep.Kind.REMINDER)
            & (Q(steps__reached__isnull=True) | Q(steps__reached__gt=0)),
        )
    )
    facts = []
    # Values, not models (see `escalation_rows`).
    for e in found.order_by("opened_at", "id").values(
        "fleet__name", f"answer__reviewer__{name}", f"assignee__{name}", "opened_at",
        "first_looked_at", "answer__id", "answer__answered_at", "answer__released", "reminders",
        "tier", "status", "due_at",
    ):  # fmt: skip
        answered = e["answer__id"] is not None
        facts.append(
            reports.TimelinessFact(
                fleet=e["fleet__name"],
                reviewer=(e[f"answer__reviewer__{name}"] if answered else e[f"assignee__{name}"])
                or "",
                first_look=reports.minutes_between(e["opened_at"], e["first_looked_at"]),
                answer=reports.minutes_between(e["opened_at"], e["answer__answered_at"]),
                reminders=e["reminders"],
                past_tier_1=e["tier"] > 1,
                overdue_now=e["status"] in Escalation.OPEN_STATES and overdue(e["due_at"], now),
                released=len(e["answer__released"] or []) if answered else None,
            )
        )
    return {
        "fleets": reports.timeliness(facts, "fleet"),
        # Nobody's (unassigned and unanswered) last, so the rows add up to the fleets'.
        "reviewers": sorted(reports.timeliness(facts, "reviewer"), key=lambda r: not r["name"]),
    }
