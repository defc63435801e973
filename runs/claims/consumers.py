"""Who consumes a claim: the tasks that name it in `consumes`, and the tasks that depend on its
producer, directly or through others, and named no `consumes` (they consume it implicitly).

A task that checks a claim (`checks`) does not consume it, nor does the task that posted it. A
claim someone consumes is load-bearing: a producer's `load_bearing: false` is raised when a task
consumes it, and is never lowered once one does.
"""

from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.db.models.expressions import RawSQL

from fleet.errors import Refusal
from runs import scheduler
from runs.models import Claim, ClaimUse, Halt, Prerequisite, Run, Task

Row = tuple[int, str, str]  # (id, key, state) of a task


def declared_consumers(run: Run, key: str) -> list[Row]:
    """The run's tasks that name claim `key` in their declared `consumes`."""
    tasks = Task.objects.filter(run=run)
    if connection.vendor == "postgresql":  # jsonb containment, filtered in the database
        return list(tasks.filter(consumes__contains=[key]).values_list("pk", "key", "state"))
    every = tasks.values_list("pk", "key", "state", "consumes")
    return [(pk, k, state) for pk, k, state, consumes in every if key in consumes]


def reach(task_id: int, *, down: bool) -> RawSQL:
    """The ids of the tasks below `task_id` (`down`) or above it, directly or through others:
    a recursive query over the edges, so its cost follows what it reaches, not the run."""
    edges = Prerequisite._meta.db_table
    start, step = ("requires_id", "task_id") if down else ("task_id", "requires_id")
    # Only the table's and its columns' names are spliced in; the task's id is a parameter.
    return RawSQL(  # noqa: S611
        f"WITH RECURSIVE reach(id) AS ("  # noqa: S608
        f"SELECT {step} FROM {edges} WHERE {start} = %s "
        f"UNION SELECT e.{step} FROM {edges} e JOIN reach r ON e.{start} = r.id"
        f") SELECT id FROM reach",
        (task_id,),
    )


def consumers(claim: Claim) -> list[Row]:
    """The tasks that consume the claim by their declaration, sorted by key: named in
    `consumes`, or implicitly below its producer; never its producer or a task that checks it."""
    run = claim.run
    found = {row[0]: row for row in declared_consumers(run, claim.key)}
    if not claim.superseded:
        implicit = Task.objects.filter(
            pk__in=reach(claim.task_id, down=True), consumes_declared=False
        ).values_list("pk", "key", "state")
        found.update({row[0]: row for row in implicit})
    found.pop(claim.task_id, None)
    if found:
        checking = Task.objects.filter(pk__in=list(found)).values_list("pk", "checks")
        for pk, checks in checking:
            if claim.key in checks:
                del found[pk]
    return sorted(found.values(), key=lambda row: row[1])


def consumers_of(claim: Claim) -> list[str]:
    return [key for _, key, _ in consumers(claim)]


def claim_changed(claim: Claim) -> None:
    """Recompute what the claim's status can hold: its named consumers and checkers, the tasks
    halted on it, and its producer, through which the recompute reaches the implicit ones."""
    run = claim.run
    named = [key for _, key, _ in declared_consumers(run, claim.key)]
    halted = Halt.objects.filter(task__run=run, key=claim.key, settled_at__isnull=True)
    scheduler.mark_changed(
        run,
        [
            *named,
            *halted.values_list("task__key", flat=True),
            *Task.objects.filter(pk=claim.task_id).values_list("key", flat=True),
        ],
    )


def users(claim: Claim) -> list[str]:
    """Every task that consumes it or started on it (a use not only to check it), by key."""
    used = ClaimUse.objects.filter(claim=claim, by_check=False).values_list("task__key", flat=True)
    return sorted({*consumers_of(claim), *used})


def raise_load_bearing(claim: Claim, *, by: str) -> bool:
    """Make a claim load-bearing, saying who raised it; False if it already was."""
    if claim.load_bearing:
        return False
    claim.load_bearing = True
    claim.raised_by = by[:500]
    claim.save(update_fields=["load_bearing", "raised_by"])
    return True


def raise_if_consumed(claims: Sequence[Claim]) -> list[Claim]:
    """Raise each claim posted as not load-bearing that a task consumes: the producer cannot know
    who builds on it, and a consumer that does not says so with an explicit `consumes`."""
    raised = []
    for claim in claims:
        if claim.load_bearing or claim.superseded:
            continue
        keys = consumers_of(claim)
        if keys and raise_load_bearing(claim, by="consumed by " + ", ".join(keys)):
            raised.append(claim)
    return raised


def record_running_uses(claim: Claim, at: datetime, *, imported: bool) -> None:
    """Tasks already running that consume a claim just posted consume it from its first moment
    (in an imported run, those that name it)."""
    others = Task.objects.filter(run_id=claim.run_id, state=Task.State.RUNNING)
    if not others.exclude(pk=claim.task_id).exists():
        return  # the usual case: what consumes it waits for its producer
    if imported:
        running = [
            (pk, key, state)
            for pk, key, state in declared_consumers(claim.run, claim.key)
            if pk != claim.task_id
        ]
    else:
        running = consumers(claim)
    ClaimUse.objects.bulk_create(
        [
            ClaimUse(claim=claim, task_id=pk, at=at)
            for pk, _, state in running
            if state == Task.State.RUNNING
        ],
        ignore_conflicts=True,
    )


def consumed_by(task: Task, extra: Sequence[str] = (), *, implicit: bool = True) -> list[str]:
    """The keys of the posted claims a task consumes now: those it names (declared, or `extra`
    on task.started), and, if it declared no `consumes`, every claim of the tasks above it
    (unless not `implicit`: an imported run records the uses its events name)."""
    claims = Claim.objects.filter(run_id=task.run_id)
    named = {*task.consumes, *extra}
    keys = set(claims.filter(key__in=sorted(named)).values_list("key", flat=True))
    if implicit and not task.consumes_declared:
        upstream = claims.filter(task_id__in=reach(task.pk, down=False), superseded=False)
        keys.update(upstream.values_list("key", flat=True))
    keys.difference_update(task.checks)  # it exists to check them: it does not build on them
    return sorted(keys)


def started_on(task: Task, extra: Sequence[str], at: datetime, *, imported: bool) -> None:
    """A task started: it consumes its claims from now on, and a claim it named on starting is
    load-bearing (naming it raises it). A past run's import records history as its events
    wrote it: the claims they name, nothing inferred, nothing raised."""
    keys = consumed_by(task, extra, implicit=not imported)
    found = list(Claim.objects.filter(run_id=task.run_id, key__in=keys).select_related("run"))
    ClaimUse.objects.bulk_create(
        [ClaimUse(claim=c, task=task, at=at) for c in found], ignore_conflicts=True
    )
    for claim in found:
        if claim.key in extra and not imported:
            raise_load_bearing(claim, by=f"named by {task.key} on task.started")


@transaction.atomic
def claim_raise(*, claim: Claim, by: str) -> Claim:
    """A reviewer makes a claim load-bearing: from now on it gates every task that consumes it."""
    claim = Claim.objects.select_for_update(of=("self",)).select_related("run").get(pk=claim.pk)
    if claim.load_bearing:
        raised = f" (raised: {claim.raised_by})" if claim.raised_by else ""
        raise Refusal(f"{claim.key} is load-bearing already{raised}.", status=409)
    raise_load_bearing(claim, by=by)
    claim_changed(claim)
    return claim
