"""Blast radius and handoffs of runs, read from the database for the pure rule."""

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.utils import timezone

from escalations import blast_radius as rule
from runs.claims.verification import sources_of_fleets
from runs.claims.verifiers import unreachable
from runs.models import Claim, ClaimUse, Evidence, Prerequisite, Run, Task


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
            run_ended_at=run_end(claim.run),
        )
    return facts


def run_end(run: Run) -> datetime | None:
    """When the run was over (a run that is over and lost its time counts from now)."""
    return None if run.state == Run.State.RUNNING else run.finished_at


# The claim's fields the facts read (with its run's end).
CLAIM_FIELDS = (
    "pk", "run_id", "key", "task__key", "posted_at", "checked_at", "status", "run__state",
    "run__finished_at",
)  # fmt: skip


def checkable_claims(claims: Any) -> set[int]:
    """Claims whose posted evidence the verifier could re-check against reality: by its own
    first step (`verifiers.unreachable`), with the fleet's sources as registered now, a data
    source, workspace, host or command the fleet registered or allows, a single reading query, a
    GET; not another agent's text. Two queries: the evidence, then the fleets' sources."""
    rows = list(
        Evidence.objects.filter(claim__in=claims, role=Evidence.Role.POSTED)
        .exclude(source__istartswith="agent:")
        .values_list(
            "claim_id", "claim__run__fleet_id", "kind", "source", "payload_hash",
            "datasource", "workspace", "payload__request__method",
        )
    )  # fmt: skip
    sources = sources_of_fleets({row[1] for row in rows})
    found = set()
    for claim_id, fleet_id, kind, source, hashed, datasource, workspace, method in rows:
        # The payload is not read (a query's result can be a megabyte); only a request's method
        # decides whether it may be sent again.
        evidence = {
            "kind": kind,
            "source": source,
            "payload_hash": hashed,
            "payload": {"request": {"method": method}} if isinstance(method, str) else None,
            "datasource": datasource or None,
            "workspace": workspace or None,
        }
        if unreachable(evidence, sources[fleet_id]) is None:
            found.add(claim_id)
    return found


# A reviewer's answer is stored as a claim on the task it answered: no agent handed it over.
REVIEWER = "reviewer:"


def one_run(run_id: int, key: str) -> str:
    return key  # within one run, a claim's or a task's key is its name


Facts = tuple[dict[str, rule.ClaimFact], dict[str, rule.TaskFact], list[rule.ClaimUse]]


def facts_for(run: Run) -> Facts:
    """The run's claims, tasks and claim uses as the pure rule's facts, in six queries."""
    return facts_for_runs([run.pk])[run.pk]


def facts_for_runs(run_ids: Sequence[int]) -> dict[int, Facts]:
    """`facts_for` of each run, the runs read together: six queries, whatever their number."""
    ids = list(run_ids)
    found: dict[int, Facts] = {run_id: ({}, {}, []) for run_id in ids}
    claims = Claim.objects.filter(run_id__in=ids)
    checkable = checkable_claims(claims)
    by_run: dict[int, list[Claim]] = {}
    for claim in claims.select_related("task", "run").only(*CLAIM_FIELDS):
        by_run.setdefault(claim.run_id, []).append(claim)
    for run_id, rows in by_run.items():
        found[run_id][0].update(claim_facts(rows, checkable, one_run))
    edges: dict[int, list[str]] = {}
    for task_id, key in Prerequisite.objects.filter(task__run_id__in=ids).values_list(
        "task_id", "requires__key"
    ):
        edges.setdefault(task_id, []).append(key)
    # A row per artifact (one with None for a task without): the rule counts only those reported
    # while a claim was unchecked, so it needs when each was reported, not how many.
    described: dict[int, tuple[int, str, str, datetime | None]] = {}
    reported: dict[int, list[datetime]] = {}
    for pk, run_id, key, agent, started_at, artifact_at in Task.objects.filter(
        run_id__in=ids
    ).values_list("pk", "run_id", "key", "agent__name", "started_at", "artifacts__created_at"):
        described[pk] = (run_id, key, agent, started_at)
        if artifact_at is not None:
            reported.setdefault(pk, []).append(artifact_at)
    for pk, (run_id, key, agent, started_at) in described.items():
        found[run_id][1][key] = rule.TaskFact(
            key=key,
            agent=agent,
            started_at=started_at,
            prerequisites=tuple(edges.get(pk, ())),
            artifacts=tuple(sorted(reported.get(pk, ()))),
        )
    for run_id, used, task, at in ClaimUse.objects.filter(claim__run_id__in=ids).values_list(
        "claim__run_id", "claim__key", "task__key", "at"
    ):
        found[run_id][2].append(rule.ClaimUse(claim=used, task=task, at=at))
    return found


def radii_for(run: Run, *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """Each claim's blast radius: agents, artifacts, minutes unchecked, tasks."""
    return radii_for_runs([run.pk], now=now)[run.pk]


def radii_for_runs(
    run_ids: Sequence[int], *, now: datetime | None = None
) -> dict[int, dict[str, dict[str, Any]]]:
    """`radii_for` of each run, the runs read together (`facts_for_runs`)."""
    now = now or timezone.now()
    found = {}
    for run_id, (claims, tasks, uses) in facts_for_runs(run_ids).items():
        radii = rule.blast_radii(claims=claims, tasks=tasks, uses=uses, now=now)
        found[run_id] = {
            key: {
                "agents": radius.agents,
                "artifacts": radius.artifacts,
                "minutes": radius.minutes,
                "tasks": list(radius.tasks),
            }
            for key, radius in radii.items()
        }
    return found


def handoffs_for(run: Run, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """Per producer agent -> consumer agent of the run: claims handed over, checkable, refuted,
    and the median minutes a claim crossing it stayed unchecked."""
    claims, tasks, uses = facts_for(run)
    answers = set(
        Claim.objects.filter(run=run, posted_by__startswith=REVIEWER).values_list("key", flat=True)
    )
    claims = {key: fact for key, fact in claims.items() if key not in answers}
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
    claims = Claim.objects.filter(run__in=runs).exclude(posted_by__startswith=REVIEWER)

    def key(run_id: int, name: str) -> str:
        return f"{run_id}:{name}"

    facts = claim_facts(
        claims.select_related("task", "run").only(*CLAIM_FIELDS), checkable_claims(claims), key
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
    named = {
        key(run_id, claim): {"run_id": run_id, "key": claim, "id": pk, "statement": statement}
        for run_id, claim, pk, statement in claims.values_list("run_id", "key", "id", "statement")
    }
    rows = [
        {
            "fleet": agents[h.producer][0],
            "producer": agents[h.producer][1],
            "consumer": agents[h.consumer][1],
            "claims": h.claims,
            "checkable": h.checkable,
            "refuted": h.refuted,
            "median_unchecked_minutes": h.median_unchecked_minutes,
            # Each claim that crossed without checkable evidence, to link to where it is shown.
            "unchecked": [named[k] for k in h.unchecked if k in named],
        }
        for h in found
    ]
    return sorted(rows, key=lambda r: (r["fleet"], r["producer"], r["consumer"]))
