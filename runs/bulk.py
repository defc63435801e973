"""The events of a batch that gate nothing, applied in bulk: claims posted and tasks finished.

A stretch of a batch's claim.posted and task.finished events is looked up in three queries (the
tasks it names with their latest attempts, the claim keys it would take, the runs' running
tasks) and its common events are written with a few bulk statements at the end:

- a claim on its producer's own task, a key new to the run, load-bearing: its row, its
  evidence's, and a use by each running task that consumes it (named in its `consumes`, or
  below its producer with none declared; never one that checks it);
- a task's own running attempt that succeeded and left no background work killed: the attempt's
  finish, the task's state and its artifacts.

`post` and `finish` answer such an event as `claim_post` and `task_finish` would. Any other is
applied on its own by the caller (None), after `write` has stored what came before it, and
`alone` says what it changed; so a batch's results and rows are those of its events one by one.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.db import connection
from django.db.models import CharField, IntegerField, OuterRef, Subquery, Value

from fleet import rows
from fleet.models import Agent
from runs import scheduler
from runs.claims.bearing import NO_SUBJECT, subjects_of
from runs.claims.circular import AGENT_TEXT, cites_an_agent
from runs.claims.posting import evidence_of, posted_reason
from runs.models import Artifact, Attempt, Claim, ClaimUse, Evidence, Prerequisite, Run, Task
from runs.specs import ClaimSpec, Outcome
from runs.task_state import FINISHED_FIELDS


class Row(NamedTuple):
    """A task the stretch names, as far as posting a claim on it or finishing it needs."""

    key: str
    pk: int
    run_id: int
    agent_id: UUID
    state: str
    attempt: int | None  # its latest attempt: id, number and outcome ("" while it runs)
    number: int | None
    outcome: str | None


class Runner(NamedTuple):
    """A running task of the stretch's runs, as far as consuming a claim goes."""

    consumes: frozenset[str]
    declared: bool  # it declared `consumes`: it consumes nothing implicitly
    checks: frozenset[str]


@dataclass(frozen=True)
class Posting:
    """One claim.posted of the batch: who posts it, when, and on which run's task."""

    actor: Agent
    at: datetime
    run: str
    task: str
    claim: ClaimSpec
    sent_by: str = ""  # the orchestrator that sent it for `actor`, if one did


@dataclass(frozen=True)
class Finishing:
    """One task.finished of the batch."""

    actor: Agent
    at: datetime
    run: str
    task: str
    outcome: Outcome


@dataclass
class Writes:
    """What the stretch answered and has yet to store."""

    claims: list[Claim] = field(default_factory=list)
    evidence: list[tuple[Claim, Evidence]] = field(default_factory=list)
    uses: list[tuple[Claim, int, datetime]] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)


class Stretch:
    """A stretch of a batch's claim.posted and task.finished, looked up at once."""

    def __init__(self, fleet_id: int, wanted: Iterable[tuple[str, str, str | None]]) -> None:
        """`wanted`: the (run, task, claim key or None) the stretch names."""
        wanted = list(wanted)
        pairs = {(run, task) for run, task, _ in wanted}
        finishing = any(key is None for _, _, key in wanted)  # a finish needs the latest attempt
        found = tasks_named(fleet_id, pairs, attempts=finishing)
        if finishing:
            # A finish changes its task: the tasks to finish are locked (as one finish alone
            # locks its task), then read again as a concurrent finish may have left them.
            ending = {(run, task) for run, task, key in wanted if key is None}
            lock([row[2] for row in found if (row[0], row[1]) in ending])
            found = tasks_named(fleet_id, pairs, attempts=True)
        # Plain rows, not models: a batch names hundreds of tasks.
        self.tasks = {
            (run, key): Row(key, *rest) for run, key, *rest in found if (run, key) in pairs
        }
        named = {row.run_id: run for (run, _), row in self.tasks.items()}
        self.runs = {run_id: Run(pk=run_id, key=key) for run_id, key in named.items()}
        keys = {key for _, _, key in wanted if key is not None}
        self.taken = claimed(set(self.runs), keys)
        self.running: dict[int, dict[int, Runner]] = defaultdict(dict)
        self.read_running(list(self.runs))
        producers = {
            row.pk
            for (run, task, key) in wanted
            if key is not None and (row := self.tasks.get((run, task))) is not None
        }
        self.below = self.running_below(producers)
        self.writes = Writes()

    def read_running(self, run_ids: list[int]) -> None:
        running = Task.objects.filter(run_id__in=run_ids, state=Task.State.RUNNING)
        for run_id in run_ids:
            self.running[run_id] = {}
        for run_id, pk, consumes, declared, checks in running.values_list(
            "run_id", "pk", "consumes", "consumes_declared", "checks"
        ):
            self.running[run_id][pk] = Runner(frozenset(consumes), declared, frozenset(checks))

    def running_below(self, producers: set[int]) -> dict[int, set[int]]:
        """For each producer, the running tasks below it that declared no `consumes` (they
        consume its claims implicitly): one walk down the edges from all of them at once."""
        implicit = {
            pk
            for runners in self.running.values()
            for pk, runner in runners.items()
            if not runner.declared
        }
        below: dict[int, set[int]] = defaultdict(set)
        if not producers or not implicit:
            return below
        edges = Prerequisite._meta.db_table
        with connection.cursor() as cursor:
            # Only the table's name is spliced in; the ids are parameters.
            cursor.execute(
                f"WITH RECURSIVE down(origin, id) AS ("  # noqa: S608
                f"SELECT requires_id, task_id FROM {edges} WHERE requires_id IN ({_marks(producers)}) "
                f"UNION SELECT d.origin, e.task_id FROM {edges} e JOIN down d ON e.requires_id = d.id"
                f") SELECT origin, id FROM down WHERE id IN ({_marks(implicit)})",
                [*producers, *implicit],
            )
            for origin, pk in cursor.fetchall():
                below[origin].add(pk)
        return below

    def post(self, posting: Posting) -> dict[str, Any] | None:
        """The claim's answer, its rows kept for `write`; None when it must be posted alone."""
        row = self.tasks.get((posting.run, posting.task))
        claim = posting.claim
        if (
            row is None
            or row.agent_id != posting.actor.pk
            or not claim.load_bearing
            or (row.run_id, claim.key) in self.taken
        ):
            return None
        evidence = claim.evidence
        subjects = subjects_of(claim.about, claim.statement)
        reason = posted_reason(evidence, imported=False, subjects=bool(subjects))
        by = f"agent:{posting.actor.name}"
        run = self.runs[row.run_id]
        posted = rows.new(
            Claim,
            run_id=row.run_id,
            task_id=row.pk,
            key=claim.key,
            statement=claim.statement,
            load_bearing=True,
            about=list(claim.about),
            posted_by=by,
            sent_by=posting.sent_by,
            posted_at=posting.at,
            status_reason=reason,
            verification_pending=(
                evidence is not None and not cites_an_agent(evidence.source) and bool(subjects)
            ),
        )
        self.writes.claims.append(posted)
        self.taken.add((row.run_id, claim.key))
        if evidence is not None:
            agent_text = cites_an_agent(evidence.source)
            stored = evidence_of(evidence, role="posted", by=by, task_id=row.pk, at=posting.at)
            stored.sent_by = posting.sent_by
            stored.verdict = Claim.Status.UNVERIFIED if agent_text or not subjects else ""
            stored.verdict_reason = AGENT_TEXT if agent_text else "" if subjects else NO_SUBJECT
            self.writes.evidence.append((posted, stored))
        below = self.below[row.pk]
        self.writes.uses += [
            (posted, pk, posting.at)
            for pk, runner in self.running[row.run_id].items()
            if pk != row.pk
            and claim.key not in runner.checks
            and (claim.key in runner.consumes or (not runner.declared and pk in below))
        ]
        # A running producer's claim holds back nothing that is ready (see claim_post).
        may_hold = row.state != Task.State.RUNNING
        scheduler.mark_changed(run, [row.key], claim=claim.key, may_hold=may_hold)
        return {"run": run.key, "claim": claim.key, "status": posted.status, "reason": reason}

    def finish(self, finishing: Finishing) -> dict[str, Any] | None:
        """The finish's answer, its writes kept for `write`; None when it must be applied alone
        (a failure or killed background work asks the retry policy; a refusal says why)."""
        row = self.tasks.get((finishing.run, finishing.task))
        outcome = finishing.outcome
        if (
            row is None
            or row.agent_id != finishing.actor.pk
            or row.state != Task.State.RUNNING
            or row.attempt is None
            or row.outcome
            or outcome.outcome != Attempt.Outcome.SUCCEEDED
            or outcome.failure is not None
            or outcome.background_killed
        ):
            return None
        at = finishing.at
        self.writes.attempts.append(
            Attempt(
                pk=row.attempt,
                finished_at=at,
                outcome=Attempt.Outcome.SUCCEEDED,
                background_killed=[],
                resumable=outcome.resumable,
            )
        )
        self.writes.tasks.append(
            Task(pk=row.pk, state=Task.State.SUCCEEDED, ready=False, finished_at=at)
        )
        self.writes.artifacts += [
            Artifact(task_id=row.pk, kind=a.kind, ref=a.ref, url=a.url or "", created_at=at)
            for a in outcome.artifacts
        ]
        done = row._replace(state=Task.State.SUCCEEDED, outcome=Attempt.Outcome.SUCCEEDED)
        self.tasks[(finishing.run, finishing.task)] = done
        self.running[row.run_id].pop(row.pk, None)
        run = self.runs[row.run_id]
        scheduler.mark_changed(run, [row.key], may_hold=False)  # a success only releases
        return {"run": run.key, "task": row.key, "state": Task.State.SUCCEEDED}

    def alone(self, run: str, task: str) -> None:
        """An event of this stretch was applied on its own: what it changed is read again."""
        row = self.tasks.get((run, task))
        if row is None:
            return
        for key in Claim.objects.filter(task_id=row.pk).values_list("key", flat=True):
            self.taken.add((row.run_id, key))
        fresh = Task.objects.filter(pk=row.pk).values_list("state", flat=True).first()
        latest = Attempt.objects.filter(task_id=row.pk).order_by("-number")
        attempt, number, outcome = latest.values_list("pk", "number", "outcome").first() or (
            None,
            None,
            None,
        )
        self.tasks[(run, task)] = row._replace(
            state=fresh or row.state, attempt=attempt, number=number, outcome=outcome
        )
        self.read_running([row.run_id])

    def write(self) -> None:
        """Store what was answered so far; the claims' verification goes after commit."""
        writes, self.writes = self.writes, Writes()
        if writes.claims:
            rows.insert(writes.claims)
            for claim, evidence in writes.evidence:
                evidence.claim = claim
            rows.insert([evidence for _, evidence in writes.evidence])
            ClaimUse.objects.bulk_create(
                [ClaimUse(claim=claim, task_id=pk, at=at) for claim, pk, at in writes.uses],
                ignore_conflicts=True,
            )
            for claim in writes.claims:
                if claim.verification_pending:
                    scheduler.verify_after_commit(claim)
        if writes.attempts:
            Attempt.objects.bulk_update(writes.attempts, FINISHED_FIELDS)
            Task.objects.bulk_update(writes.tasks, ["state", "ready", "finished_at"])
            Artifact.objects.bulk_create(writes.artifacts)


def tasks_named(
    fleet_id: int, pairs: set[tuple[str, str]], *, attempts: bool
) -> list[tuple[Any, ...]]:
    """(run key, task key, id, run id, agent id, state, latest attempt's id, number, outcome)
    for each (run, task) of the fleet found; the attempt's three None unless `attempts`.

    On PostgreSQL each pair is one probe of the (run, key) index, however many tasks the run
    has: filtered by run and by a list of keys, the planner reads every task of the run when its
    statistics are behind (a run just started, a table not analyzed since it grew)."""
    if not pairs:
        return []
    if connection.vendor != "postgresql":
        return list(_tasks_named_by_the_orm(fleet_id, pairs, attempts=attempts))
    latest = (
        "LEFT JOIN LATERAL (SELECT id, number, outcome FROM runs_attempt WHERE task_id = t.id "
        "ORDER BY number DESC LIMIT 1) a ON true"
        if attempts
        else "LEFT JOIN (SELECT NULL::bigint AS id, NULL::integer AS number, "
        "NULL::text AS outcome) a ON false"
    )
    runs, tasks = zip(*sorted(pairs), strict=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.run, t.key, t.id, t.run_id, t.agent_id, t.state, a.id, a.number, a.outcome "  # noqa: S608
            "FROM unnest(%s::text[], %s::text[]) AS w(run, task) "
            # A subquery for each pair, which the planner cannot turn into a scan of the fleet's
            # runs or of the run's tasks
            "CROSS JOIN LATERAL (SELECT id FROM runs_run WHERE fleet_id = %s AND key = w.run "
            "LIMIT 1) r "
            "CROSS JOIN LATERAL (SELECT id, key, run_id, agent_id, state FROM runs_task "
            f"WHERE run_id = r.id AND key = w.task LIMIT 1) t {latest}",
            [list(runs), list(tasks), fleet_id],
        )
        return cursor.fetchall()


def _tasks_named_by_the_orm(
    fleet_id: int, pairs: set[tuple[str, str]], *, attempts: bool
) -> Iterable[tuple[Any, ...]]:
    tasks = Task.objects.filter(
        run__fleet_id=fleet_id,
        run__key__in={run for run, _ in pairs},
        key__in={task for _, task in pairs},
    )
    if attempts:
        latest = Attempt.objects.filter(task=OuterRef("pk")).order_by("-number")
        tasks = tasks.annotate(
            attempt=Subquery(latest.values("pk")[:1]),
            number=Subquery(latest.values("number")[:1]),
            attempt_outcome=Subquery(latest.values("outcome")[:1]),
        )
    else:
        tasks = tasks.annotate(
            attempt=Value(None, output_field=IntegerField()),
            number=Value(None, output_field=IntegerField()),
            attempt_outcome=Value(None, output_field=CharField()),
        )
    return tasks.values_list(
        "run__key", "key", "pk", "run_id", "agent_id", "state", "attempt", "number",
        "attempt_outcome",
    )  # fmt: skip


def lock(task_ids: list[int]) -> None:
    """Lock the tasks until the transaction ends, in the order of their ids (every batch takes
    them in the same order)."""
    if task_ids:
        tasks = Task.objects.filter(pk__in=task_ids).order_by("pk").select_for_update()
        list(tasks.values_list("pk", flat=True))


def claimed(run_ids: set[int], keys: set[str]) -> set[tuple[int, str]]:
    """The (run id, key) of `keys` already claimed in the runs; on PostgreSQL one probe of the
    (run, key) index a pair, however many claims the runs have (see `tasks_named`)."""
    if not run_ids or not keys:
        return set()
    if connection.vendor != "postgresql":
        found = Claim.objects.filter(run_id__in=run_ids, key__in=keys)
        return set(found.values_list("run_id", "key"))
    pairs = sorted((run, key) for run in run_ids for key in keys)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.run_id, c.key FROM unnest(%s::bigint[], %s::text[]) AS w(run_id, key) "
            "CROSS JOIN LATERAL (SELECT run_id, key FROM runs_claim "
            "WHERE run_id = w.run_id AND key = w.key LIMIT 1) c",
            [[run for run, _ in pairs], [key for _, key in pairs]],
        )
        return set(cursor.fetchall())


def _marks(ids: set[int]) -> str:
    return ", ".join(["%s"] * len(ids))
